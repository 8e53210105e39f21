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
    /// Would [`admit`](Self::admit) pass `event` on at once with nothing before it and
    /// nothing changed? (Nothing is held and the event is not inside a transaction:
    /// nearly every event, and the writer then skips the call.)
    #[inline]
    pub(crate) fn passes(&self, event: &Event) -> bool {
        self.held.is_empty()
            && !matches!(
                event,
                Event::Ok {
                    in_transaction: true,
                    ..
                }
            )
    }

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

    /// `passes` says yes only where `admit` would hand the event on alone and change
    /// nothing: the writer's shortcut past `admit` must not lose a held event.
    #[test]
    fn passes_only_where_admit_would_pass_the_event_alone() {
        let mut s = StringTable::new();
        let error = Event::DecodeError {
            thread: Thread::default(),
            time: Some(9),
            ip: None,
            message: s.intern("lost"),
        };
        let events = [
            branch(1, Kind::Call, false),
            branch(2, Kind::Call, true),
            branch(3, Kind::TxAbort, false),
            error,
        ];
        for holding in [false, true] {
            for e in &events {
                let mut tx = Transaction::default();
                if holding {
                    assert!(tx.admit(&branch(0, Kind::Call, true), ()).is_none());
                }
                let passes = tx.passes(e);
                let held_before = tx.held.len();
                let alone = tx
                    .admit(e, ())
                    .is_some_and(|a| a.earlier.is_empty() && !a.dropped_at_error)
                    && tx.held.len() == held_before;
                assert!(
                    !passes || alone,
                    "passes {e:?} (holding: {holding}), admit does not agree"
                );
                // And it does say yes to the plain case, or the shortcut would never run.
                if !holding
                    && !matches!(
                        e,
                        Event::Ok {
                            in_transaction: true,
                            ..
                        }
                    )
                {
                    assert!(passes, "{e:?}");
                }
            }
        }
    }
}
