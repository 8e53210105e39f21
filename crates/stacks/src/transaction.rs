//! Intel TSX: what a transaction does happened only if it commits, so both writers
//! hold its events until they know.

use ptscope_event::{Event, EventData, Kind};
use std::collections::VecDeque;

/// The events of the open transaction, each with what the writer keeps beside it.
pub(crate) struct Transaction<X> {
    held: VecDeque<(Event, X)>,
}

/// What to do with an event [`Transaction::admit`] did not hold.
pub(crate) struct Admitted<X> {
    /// Held events that turned out to have happened (the transaction committed), to be
    /// written first, in order.
    pub(crate) earlier: VecDeque<(Event, X)>,
    /// Held events were dropped because the event is a decode error.
    pub(crate) dropped_at_error: bool,
}

impl<X> Default for Transaction<X> {
    fn default() -> Self {
        Transaction {
            held: VecDeque::new(),
        }
    }
}

impl<X> Transaction<X> {
    /// Holds `event` (with `extra`) if it is inside a transaction; otherwise says what
    /// to write before it: an abort or a decode error drops what was held, any other
    /// event outside a transaction commits it.
    pub(crate) fn admit(&mut self, event: &Event, extra: X) -> Option<Admitted<X>> {
        let mut dropped_at_error = false;
        match event {
            Event::Ok {
                data,
                in_transaction,
                ..
            } => {
                let abort = matches!(
                    data,
                    EventData::Trace {
                        kind: Some(Kind::TxAbort),
                        ..
                    }
                );
                if abort {
                    self.held.clear();
                } else if *in_transaction {
                    self.held.push_back((event.clone(), extra));
                    return None;
                }
            }
            Event::DecodeError { .. } => {
                dropped_at_error = !self.held.is_empty();
                self.held.clear();
            }
        }
        Some(Admitted {
            earlier: std::mem::take(&mut self.held),
            dropped_at_error,
        })
    }

    /// Forgets what is held (a new snapshot begins).
    pub(crate) fn clear(&mut self) {
        self.held.clear();
    }

    /// Takes what is held, as if the transaction committed.
    pub(crate) fn take(&mut self) -> VecDeque<(Event, X)> {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptscope_event::{LocationHandle, StringTable, Thread};

    /// A branch; the transaction looks at kinds only, so its ends are no table's.
    fn branch(time: u64, kind: Kind, in_transaction: bool) -> Event {
        let at = LocationHandle(0);
        Event::Ok {
            thread: Thread::default(),
            time,
            in_transaction,
            data: EventData::Trace {
                change: None,
                kind: Some(kind),
                src: at,
                dst: at,
            },
        }
    }

    #[test]
    fn held_until_commit_dropped_at_abort_or_error() {
        let mut tx = Transaction::default();
        let times = |a: Option<Admitted<u8>>| {
            let a = a.expect("admitted");
            let t: Vec<_> = a.earlier.iter().map(|(e, x)| (e.time(), *x)).collect();
            (t, a.dropped_at_error)
        };
        assert!(tx.admit(&branch(1, Kind::Call, true), 1).is_none());
        assert!(tx.admit(&branch(2, Kind::Call, true), 2).is_none());
        // Committed: the held events come first, in order.
        let commit = tx.admit(&branch(3, Kind::Return, false), 3);
        assert_eq!(times(commit), (vec![(Some(1), 1), (Some(2), 2)], false));
        assert!(tx.admit(&branch(4, Kind::Call, true), 4).is_none());
        let abort = tx.admit(&branch(5, Kind::TxAbort, false), 5);
        assert_eq!(times(abort), (vec![], false));
        assert!(tx.admit(&branch(6, Kind::Call, true), 6).is_none());
        let mut s = StringTable::new();
        let error = Event::DecodeError {
            thread: Thread::default(),
            time: Some(7),
            ip: None,
            message: s.intern("lost"),
        };
        assert_eq!(times(tx.admit(&error, 7)), (vec![], true));
        assert!(tx.take().is_empty());
    }
}
