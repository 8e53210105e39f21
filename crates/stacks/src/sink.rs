//! Where stack writers send what they reconstruct.
//!
//! A [`TraceSink`] receives named tracks and timed slices; the FXT file writer and the
//! test transcript are both sinks, so a stack writer never knows which one it feeds.
//! Times are nanoseconds since the start of the trace (the first event), which is
//! what FXT ticks and the transcript print.

/// A value attached to a slice.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum ArgValue<'a> {
    /// A signed integer.
    Int(i64),
    /// A string written once per use (not worth a table slot).
    Str(&'a str),
    /// A string that recurs and should be interned in the output's string table.
    Interned(&'a str),
    /// An address, shown in hex.
    Pointer(u64),
    /// A floating-point number.
    Float(f64),
}

/// The argument naming a frame's address (every frame begin with a known address has
/// it): a `static`, so every use is the same text at the same address, which a sink may
/// recognise by address (the FXT writer keeps its string-table slot instead of looking
/// it up on every begin).
pub static ADDRESS_ARG: &str = "address";
/// The argument naming a frame's function (every frame begin has it); see [`ADDRESS_ARG`].
pub static SYMBOL_ARG: &str = "symbol";

/// A named argument of a slice, instant or counter.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Arg<'a> {
    /// The argument's name.
    pub name: &'a str,
    /// Its value.
    pub value: ArgValue<'a>,
}

impl<'a> Arg<'a> {
    /// Shorthand constructor.
    pub fn new(name: &'a str, value: ArgValue<'a>) -> Self {
        Arg { name, value }
    }
}

/// A slice's name with the caller's number for it: `key` stands for `text` wherever the
/// caller uses it (a function's number in its table), so a sink can keep what it
/// worked out for the text (its string-table slot) by number instead of looking the
/// text up at every slice. A key names one text for the sink's whole life; a sink that
/// meets one key with two texts held at once (two callers' tables) goes by the text,
/// but may take a text at the address and of the length of the one it last met under
/// the key for that one (it need not compare them).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Name<'a> {
    /// The caller's number for the name.
    pub key: u32,
    /// The name.
    pub text: &'a str,
}

impl<'a> Name<'a> {
    /// Shorthand constructor.
    pub fn new(key: u32, text: &'a str) -> Self {
        Name { key, text }
    }
}

/// A receiver of reconstructed trace data.
///
/// Sinks must not fail the stack writer: an I/O error is remembered by the sink and
/// reported when it is finished, so nothing already reconstructed is thrown away.
pub trait TraceSink {
    /// The sink's handle for a thread track.
    type Thread: Copy;

    /// Creates a track group (a "process" in Perfetto) and returns its id.
    fn allocate_pid(&mut self, name: &str) -> u32;
    /// Creates a thread track inside group `pid`.
    fn allocate_thread(&mut self, pid: u32, name: &str) -> Self::Thread;
    /// Gives group `pid` a new name (its program exec'd, or its name arrived after its
    /// first slice). Sinks without names ignore it.
    fn rename_pid(&mut self, pid: u32, name: &str) {
        let _ = (pid, name);
    }
    /// Gives a thread track a new name (the thread renamed itself). Sinks without names
    /// ignore it.
    fn rename_thread(&mut self, thread: Self::Thread, name: &str) {
        let _ = (thread, name);
    }
    /// Opens a slice.
    fn duration_begin(&mut self, thread: Self::Thread, name: &str, time: i64, args: &[Arg<'_>]);
    /// Opens a slice named by a numbered [`Name`]: the same slice as
    /// [`duration_begin`](Self::duration_begin) of its text, which is what sinks that
    /// keep nothing per name do.
    fn duration_begin_name(
        &mut self,
        thread: Self::Thread,
        name: Name<'_>,
        time: i64,
        args: &[Arg<'_>],
    ) {
        self.duration_begin(thread, name.text, time, args)
    }
    /// Closes the innermost open slice on the track (`name` is informative).
    fn duration_end(&mut self, thread: Self::Thread, name: &str, time: i64, args: &[Arg<'_>]);
    /// A slice whose start and end are both known.
    fn duration_complete(
        &mut self,
        thread: Self::Thread,
        name: &str,
        start: i64,
        end: i64,
        args: &[Arg<'_>],
    );
    /// A zero-length slice.
    fn duration_instant(&mut self, thread: Self::Thread, name: &str, time: i64, args: &[Arg<'_>]);
    /// A counter sample; each numeric arg is one series.
    fn counter(&mut self, thread: Self::Thread, name: &str, time: i64, args: &[Arg<'_>]);
    /// A begin the writer learnt of late (a frame open since before what it already
    /// wrote): it comes before everything already written on the thread at `time`.
    fn duration_begin_deferred(
        &mut self,
        thread: Self::Thread,
        name: &str,
        time: i64,
        args: &[Arg<'_>],
    ) {
        self.duration_begin(thread, name, time, args)
    }
    /// A begin learnt of late that encloses everything already written on the thread
    /// from `time` on, earlier such begins at `time` included (a caller a return
    /// revealed below what was known: the outermost is revealed last).
    fn duration_begin_enclosing(
        &mut self,
        thread: Self::Thread,
        name: &str,
        time: i64,
        args: &[Arg<'_>],
    ) {
        self.duration_begin_deferred(thread, name, time, args)
    }
    /// A complete slice learnt of late, like [`duration_begin_deferred`](Self::duration_begin_deferred).
    fn duration_complete_deferred(
        &mut self,
        thread: Self::Thread,
        name: &str,
        start: i64,
        end: i64,
        args: &[Arg<'_>],
    ) {
        self.duration_complete(thread, name, start, end, args)
    }
    /// The input has ended: what comes after this was deferred by the writer until its
    /// end. Only the transcript shows it (magic-trace's tests print a marker there).
    fn end_of_input(&mut self) {}
    /// A warning meant for the person running ptscope (e.g. a decode error): each sink
    /// decides where it goes (a transcript keeps it in line, the FXT sink hands it to
    /// its caller); no sink prints.
    fn warning(&mut self, message: &str);
}
