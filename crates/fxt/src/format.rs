//! Numeric constants of the Fuchsia Trace Format that both the writer and the reader use.
//!
//! Kept in one place so the two halves cannot drift apart; the values are from the FXT
//! specification (record, event, argument and kernel-object type numbers).

/// The magic (trace-info) record every file starts with.
pub const MAGIC: u64 = 0x0016_5478_4604_0010;

/// Largest record, in 64-bit words, that the 12-bit size field can describe.
pub const MAX_RECORD_WORDS: usize = 4095;
/// Longest string the spec recommends (Perfetto and the Python reader accept it).
pub const MAX_STRING_LEN: usize = 32_000;
/// Highest string-table index (indexes are 15 bits, 0 means "empty string").
pub const MAX_STRING_INDEX: u16 = 0x7FFF;
/// Highest thread-table index (indexes are 8 bits, 0 means "inline").
pub const MAX_THREAD_INDEX: u8 = 255;
/// Most arguments one record can carry (the count field is 4 bits).
pub const MAX_ARGS: usize = 15;

/// Record type numbers (`[0..3]` of the header).
pub mod record {
    /// Metadata: magic, provider info/section/event.
    pub const METADATA: u8 = 0;
    /// Initialization: ticks per second.
    pub const INITIALIZATION: u8 = 1;
    /// String table entry.
    pub const STRING: u8 = 2;
    /// Thread table entry.
    pub const THREAD: u8 = 3;
    /// Event.
    pub const EVENT: u8 = 4;
    /// Blob.
    pub const BLOB: u8 = 5;
    /// Userspace object.
    pub const USERSPACE_OBJECT: u8 = 6;
    /// Kernel object (process/thread names).
    pub const KERNEL_OBJECT: u8 = 7;
    /// Scheduling (context switch, wakeup).
    pub const SCHEDULING: u8 = 8;
    /// Log message.
    pub const LOG: u8 = 9;
    /// Large record, with a 32-bit size field.
    pub const LARGE: u8 = 15;
}

/// Metadata record sub-types (`[16..19]`).
pub mod metadata {
    /// Provider info: id and name.
    pub const PROVIDER_INFO: u8 = 1;
    /// Provider section: switches the current provider.
    pub const PROVIDER_SECTION: u8 = 2;
    /// Provider event (e.g. buffer full).
    pub const PROVIDER_EVENT: u8 = 3;
    /// Trace info (the magic record is trace-info type 0).
    pub const TRACE_INFO: u8 = 4;
}

/// Event type numbers (`[16..19]` of an event record).
pub mod event {
    /// Instant event.
    pub const INSTANT: u8 = 0;
    /// Counter event (trailer: counter id).
    pub const COUNTER: u8 = 1;
    /// Duration begin.
    pub const BEGIN: u8 = 2;
    /// Duration end.
    pub const END: u8 = 3;
    /// Duration complete (trailer: absolute end ticks).
    pub const COMPLETE: u8 = 4;
    /// Async begin (trailer: correlation id).
    pub const ASYNC_BEGIN: u8 = 5;
    /// Async instant (trailer: correlation id).
    pub const ASYNC_INSTANT: u8 = 6;
    /// Async end (trailer: correlation id).
    pub const ASYNC_END: u8 = 7;
    /// Flow begin (trailer: flow id).
    pub const FLOW_BEGIN: u8 = 8;
    /// Flow step (trailer: flow id).
    pub const FLOW_STEP: u8 = 9;
    /// Flow end (trailer: flow id).
    pub const FLOW_END: u8 = 10;
}

/// Argument type numbers (`[0..3]` of an argument header).
pub mod arg {
    /// No value.
    pub const NULL: u8 = 0;
    /// Signed 32-bit, stored in the header.
    pub const INT32: u8 = 1;
    /// Unsigned 32-bit, stored in the header.
    pub const UINT32: u8 = 2;
    /// Signed 64-bit, one extra word.
    pub const INT64: u8 = 3;
    /// Unsigned 64-bit, one extra word.
    pub const UINT64: u8 = 4;
    /// IEEE double, one extra word.
    pub const DOUBLE: u8 = 5;
    /// String reference in the header, inline stream after the name.
    pub const STRING: u8 = 6;
    /// Pointer, one extra word.
    pub const POINTER: u8 = 7;
    /// Kernel object id, one extra word.
    pub const KOID: u8 = 8;
    /// Boolean, bit 32 of the header.
    pub const BOOL: u8 = 9;
}

/// Kernel object types (`ZX_OBJ_TYPE_*`) that trace viewers understand.
pub mod object {
    /// A process; its record names the process.
    pub const PROCESS: u8 = 1;
    /// A thread; its record names the thread and carries a `"process"` koid argument.
    pub const THREAD: u8 = 2;
}
