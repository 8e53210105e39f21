//! Control that lands in a frame already on the stack (issue 25): a `jmp` or a `return`
//! from ordinary code straight into an ancestor (`longjmp`, hand-written unwinders,
//! coroutine switches, libgcc's `uw_install_context`) unwinds to that frame; it is no
//! tail call. Decoded from `perf script` text as `ptscope decode --perf-script` does, in
//! the layout of magic-trace's fixtures; the same shapes recorded from a real program
//! are scored through both decoders in `crates/groundtruth/tests/realworld_sim.rs`
//! (`c_hand_written_unwinds`).

use ptscope_decode::Decoder;
use ptscope_stacks::segments::SegmentsWriter;
use ptscope_stacks::transcript::TranscriptSink;
use ptscope_stacks::{StackWriter, WriterConfig};

/// The issue's minimal input: `_start > main > a > b > c > d`, then `d` jumps to
/// `a+0x15` (just after `a`'s call of `b`); later `d` returns straight to `main+0x44`.
const INPUT: &str = include_str!("data/unwind_into_ancestor.perf");
/// What `ptscope decode --perf-script INPUT --format transcript` must print for it.
const EXPECTED: &str = include_str!("data/unwind_into_ancestor.expected.txt");

/// One branch of the input, as (ns after 100 s, kind, source, destination); a location
/// is (address, symbol, offset).
type Branch = (u64, &'static str, Loc, Loc);
type Loc = (u64, &'static str, u64);

/// The issue's input as branches (`input_text` renders them; a test checks that gives
/// the file back byte for byte, so variants are edits of exactly that input).
const BRANCHES: [Branch; 15] = [
    START_MAIN,
    (120, "call", (0x401110, "main", 0x10), (0x401200, "a", 0)),
    (130, "call", (0x401210, "a", 0x10), (0x401300, "b", 0)),
    (140, "call", (0x401310, "b", 0x10), (0x401400, "c", 0)),
    (150, "call", (0x401410, "c", 0x10), (0x401500, "d", 0)),
    (160, "jmp", (0x401520, "d", 0x20), (0x401215, "a", 0x15)),
    (170, "call", (0x401230, "a", 0x30), (0x401600, "e", 0)),
    (180, "return", (0x401640, "e", 0x40), (0x401235, "a", 0x35)),
    (190, "call", (0x401250, "a", 0x50), (0x401300, "b", 0)),
    (200, "call", (0x401310, "b", 0x10), (0x401400, "c", 0)),
    (210, "call", (0x401410, "c", 0x10), (0x401500, "d", 0)),
    (
        220,
        "return",
        (0x401560, "d", 0x60),
        (0x401144, "main", 0x44),
    ),
    (230, "call", (0x401170, "main", 0x70), (0x401600, "e", 0)),
    (
        240,
        "return",
        (0x401640, "e", 0x40),
        (0x401175, "main", 0x75),
    ),
    main_returns(250),
];

/// `_start` calls `main`: the first branch of most inputs here.
const START_MAIN: Branch = (
    110,
    "call",
    (0x401008, "_start", 0x8),
    (0x401100, "main", 0),
);

/// `main` returns to `_start` at `ns`: the last branch of most inputs here.
const fn main_returns(ns: u64) -> Branch {
    (
        ns,
        "return",
        (0x401190, "main", 0x90),
        (0x401010, "_start", 0x10),
    )
}

/// A line of the input: a branch, or a decode error then the `tr strt` where decoding
/// picked up again.
#[derive(Clone, Copy)]
enum Line {
    Branch(Branch),
    Lost { ns: u64, resume: Loc },
}

/// A location as perf prints it: the address, then the symbol, offset and object.
fn location((ip, sym, off): Loc) -> (String, String) {
    let name = if sym.is_empty() {
        "[unknown]".to_string()
    } else {
        format!("{sym}+{off:#x}")
    };
    (format!("{ip:x}"), format!("{name} (/opt/app/bin/app)"))
}

/// One `perf script` branch line, laid out as in the issue.
fn branch_line(ns: u64, kind: &str, src: Loc, dst: Loc) -> String {
    let ((sa, sn), (da, dn)) = (location(src), location(dst));
    format!(
        "1234/1234 100.{ns:09}:                            1   branches:uH:   {kind:<37}{sa} {sn} => {da:>16} {dn}\n"
    )
}

/// `perf script` text in magic-trace's layout (the issue's file is written the same way).
fn input_text(lines: &[Line]) -> String {
    let mut out = String::new();
    for l in lines {
        match *l {
            Line::Branch((ns, kind, src, dst)) => out.push_str(&branch_line(ns, kind, src, dst)),
            Line::Lost { ns, resume } => {
                out.push_str(&format!(
                    " instruction trace error type 1 time 100.{ns:09} cpu -1 pid 1234 tid 1234 ip 0x{:x} code 7: Overflow packet\n",
                    resume.0
                ));
                out.push_str(&branch_line(ns + 5, "tr strt", (0, "", 0), resume));
            }
        }
    }
    out
}

fn issue_lines() -> Vec<Line> {
    as_lines(BRANCHES).collect()
}

/// Branches as lines of the input.
fn as_lines(branches: impl IntoIterator<Item = Branch>) -> impl Iterator<Item = Line> {
    branches.into_iter().map(Line::Branch)
}

/// The transcript `ptscope decode --perf-script … --format transcript` writes.
fn transcript(text: &str) -> String {
    transcript_with(text, false)
}

/// [`transcript`], with [`WriterConfig::mark_unknown_frames`] as `mark`.
fn transcript_with(text: &str, mark: bool) -> String {
    let mut d = Decoder::new(text.as_bytes());
    let mut events = Vec::new();
    while let Some(e) = d.next_event().expect("decodes") {
        events.push(e);
    }
    let earliest = events.iter().find_map(|e| e.time()).expect("a timed event");
    let mut w = SegmentsWriter::new(
        TranscriptSink::default(),
        WriterConfig {
            annotate_inferred_start_times: true,
            earliest_time: earliest,
            mark_unknown_frames: mark,
            ..WriterConfig::default()
        },
    );
    for e in &events {
        w.write_event(e, d.strings());
    }
    w.end_of_input();
    w.finish(d.strings()).render()
}

/// The stack (root first) at `ns` after the transcript's time 0, as a viewer draws it:
/// slices nest by begin/end order; a slice covers `[begin, end)`.
fn stack_at(transcript: &str, ns: i64) -> Vec<String> {
    let mut open: Vec<(i64, String)> = Vec::new();
    let mut slices: Vec<(i64, i64, usize, String)> = Vec::new();
    for l in transcript.lines() {
        let Some(rest) = l.strip_prefix("->") else {
            continue;
        };
        // Instants (decode errors) are no slices.
        if rest.contains("[decode error") {
            continue;
        }
        let rest = rest.trim_start();
        let (time, rest) = rest.split_once(' ').expect("a time");
        let t: i64 = time
            .strip_suffix("ns")
            .and_then(|n| n.parse().ok())
            .expect("times in ns");
        let rest = rest.trim_start();
        if let Some(name) = rest.strip_prefix("BEGIN ") {
            let name = name.trim_end_matches(" [inferred start time]");
            open.push((t, name.to_string()));
        } else if rest.starts_with("END") {
            let (s, n) = open.pop().expect("an end closes a begin");
            slices.push((s, t, open.len(), n));
        }
    }
    assert!(open.is_empty(), "unclosed slices in\n{transcript}");
    let mut at: Vec<(usize, String)> = slices
        .into_iter()
        .filter(|s| s.0 <= ns && ns < s.1)
        .map(|s| (s.2, s.3))
        .collect();
    at.sort();
    for (i, (depth, _)) in at.iter().enumerate() {
        assert_eq!(*depth, i, "slices at {ns} ns do not nest:\n{transcript}");
    }
    at.into_iter().map(|s| s.1).collect()
}

/// Checks the stacks at instants `(ns, stack)` (times after the first event).
fn assert_stacks(what: &str, transcript: &str, want: &[Expected]) {
    for (ns, stack) in want {
        assert_eq!(
            stack_at(transcript, *ns),
            *stack,
            "{what}: stack at {ns} ns\n{transcript}"
        );
    }
}

/// The stack expected at an instant (ns after the first event), root first.
type Expected = (i64, &'static [&'static str]);

const BEFORE: &[&str] = &["_start", "main", "a", "b", "c", "d"];
const AFTER_FIRST: &[&str] = &["_start", "main", "a"];
const IN_E: &[&str] = &["_start", "main", "a", "e"];
const AFTER_SECOND: &[&str] = &["_start", "main"];
const IN_E_AGAIN: &[&str] = &["_start", "main", "e"];

/// The stacks every variant must show: before the first unwind, after it (in `a`, then
/// in `e` called by `a`), after the second (in `main`, then in `e` called by `main`).
const STACKS: &[Expected] = &[
    (45, BEFORE),
    (55, AFTER_FIRST),
    (65, IN_E),
    (75, AFTER_FIRST),
    (115, AFTER_SECOND),
    (125, IN_E_AGAIN),
    (135, AFTER_SECOND),
];

#[test]
fn the_issues_input_is_what_the_variants_edit() {
    assert_eq!(input_text(&issue_lines()), INPUT);
}

/// The issue's expected stacks, as a snapshot of the whole transcript: `b`, `c`, `d` end
/// at the jump (50 ns) and no second `a` begins; all of them end at the return to `main`.
#[test]
fn a_jump_into_an_ancestor_unwinds_to_it() {
    let got = transcript(INPUT);
    assert_eq!(got, EXPECTED, "transcript of the issue's input");
    assert_stacks("the issue's input", &got, STACKS);
}

/// Every way of landing in `a`: a `jmp` or a `return`, at its resume address or anywhere
/// in its body; and the second unwind as a `jmp` as well as a `return`.
#[test]
fn every_way_of_landing_in_an_ancestor_unwinds_to_it() {
    for (first, second) in [
        ("jmp", "return"),
        ("return", "return"),
        ("jmp", "jmp"),
        ("return", "jmp"),
    ] {
        for landing in [(0x401215, "a", 0x15), (0x40123c, "a", 0x3c)] {
            let mut lines = issue_lines();
            if let Line::Branch(b) = &mut lines[5] {
                b.1 = first;
                b.3 = landing;
            }
            if let Line::Branch(b) = &mut lines[11] {
                b.1 = second;
            }
            let what = format!("{first} to {:#x}, then {second} to main", landing.0);
            assert_stacks(&what, &transcript(&input_text(&lines)), STACKS);
        }
    }
}

/// Snapshots that start after `a` was entered: the unwind still finds it on the stack.
/// Starting in `main` (its call of `a` is the first branch), the whole stack is known
/// from the start (`_start` from the last return). Starting in `a`, the return straight
/// to `main` goes past everything the trace has shown: it lands beyond the known root
/// (nothing says whether `main` called `a` directly, so no caller is made up for the
/// stacks before it), and from there on the stacks are whole again.
#[test]
fn snapshots_starting_above_the_ancestor_still_unwind_to_it() {
    for dropped in 1..=2 {
        let got = transcript(&input_text(&issue_lines()[dropped..]));
        let shift = 10 * dropped as i64;
        for &(ns, stack) in STACKS {
            // Starting in `a`, the stacks before the return to `main` lack its callers.
            let cut = if dropped == 2 && ns < 110 { 2 } else { 0 };
            let (ns, want) = (ns - shift, &stack[cut..]);
            assert_eq!(
                stack_at(&got, ns),
                want,
                "snapshot without {dropped} branches: stack at {ns} ns\n{got}"
            );
        }
    }
}

/// Decode errors around the unwind: just before the jump (the new segment knows only
/// `d`), right after it, instead of it (the unwind itself is lost), and just before the
/// return straight to `main`. The frames open before each gap line up with what follows
/// it; nothing is left open above the ancestor, and no frame is nested in itself.
#[test]
fn decode_errors_around_the_unwind_keep_the_stacks() {
    let lost = |ns, resume| Line::Lost { ns, resume };
    let cases: Vec<(&str, Vec<Line>, Vec<Expected>)> = vec![
        (
            "before the jump",
            splice(4, 5, &[lost(152, (0x401518, "d", 0x18))]),
            vec![
                (55, AFTER_FIRST),
                (65, IN_E),
                (115, AFTER_SECOND),
                (125, IN_E_AGAIN),
            ],
        ),
        (
            "right after the jump",
            splice(6, 6, &[lost(162, (0x401220, "a", 0x20))]),
            vec![
                (45, BEFORE),
                (65, IN_E),
                (75, AFTER_FIRST),
                (115, AFTER_SECOND),
            ],
        ),
        (
            "instead of the jump",
            splice(5, 6, &[lost(152, (0x401228, "a", 0x28))]),
            vec![
                (41, BEFORE),
                (65, IN_E),
                (75, AFTER_FIRST),
                (115, AFTER_SECOND),
            ],
        ),
        (
            "before the return to main",
            splice(11, 11, &[lost(212, (0x401540, "d", 0x40))]),
            vec![
                (45, BEFORE),
                (55, AFTER_FIRST),
                (65, IN_E),
                (125, IN_E_AGAIN),
            ],
        ),
    ];
    for (what, lines, want) in cases {
        let got = transcript(&input_text(&lines));
        assert_stacks(what, &got, &want);
        for ns in (0..140).step_by(5) {
            let s = stack_at(&got, ns);
            for (i, f) in s.iter().enumerate() {
                assert!(
                    !s[i + 1..].contains(f),
                    "{what}: {f} nested in itself at {ns} ns: {s:?}\n{got}"
                );
            }
        }
    }
}

/// The issue's branches with `lines[from..to]` replaced by `with`.
fn splice(from: usize, to: usize, with: &[Line]) -> Vec<Line> {
    let mut lines = issue_lines();
    lines.splice(from..to, with.iter().copied());
    lines
}

/// The writer's other rules for control landing in a frame already on the stack, each
/// against the same shape: a signal handler (delivered as `raise`'s syscall returns) that
/// does not return into its trampoline but straight into `main`'s body, and `longjmp`
/// from the handler's callee into `main`. Both leave `work`, `raise` and the handler.
#[test]
fn a_signal_handler_leaving_into_an_ancestor_unwinds_to_it() {
    for (how, leave) in [
        (
            "return from the handler",
            vec![(
                230,
                "return",
                (0x401740, "on_usr1", 0x40),
                (0x401144, "main", 0x44),
            )],
        ),
        (
            "longjmp from its callee",
            vec![
                (
                    230,
                    "call",
                    (0x401730, "on_usr1", 0x30),
                    (0x401800, "longjmp", 0),
                ),
                (
                    235,
                    "call",
                    (0x401810, "longjmp", 0x10),
                    (0x401900, "__longjmp", 0),
                ),
                (
                    240,
                    "jmp",
                    (0x401920, "__longjmp", 0x20),
                    (0x401144, "main", 0x44),
                ),
            ],
        ),
    ] {
        let mut branches: Vec<Branch> = vec![
            START_MAIN,
            (120, "call", (0x401110, "main", 0x10), (0x401200, "work", 0)),
            (
                130,
                "call",
                (0x401210, "work", 0x10),
                (0x401300, "raise", 0),
            ),
            (
                140,
                "tr end  syscall",
                (0x401320, "raise", 0x20),
                (0, "", 0),
            ),
            (200, "tr strt", (0, "", 0), (0x401700, "on_usr1", 0)),
        ];
        // The handler calls `note`, then leaves.
        branches.extend(&handler(210)[..2]);
        branches.extend(leave);
        branches.extend([
            (260, "call", (0x401170, "main", 0x70), (0x401600, "note", 0)),
            (
                270,
                "return",
                (0x401640, "note", 0x40),
                (0x401175, "main", 0x75),
            ),
            main_returns(280),
        ]);
        let lines: Vec<Line> = as_lines(branches).collect();
        let got = transcript(&input_text(&lines));
        assert_stacks(
            how,
            &got,
            &[
                (25, &["_start", "main", "work", "raise"]),
                (95, &["_start", "main", "work", "raise", "on_usr1"]),
                (105, &["_start", "main", "work", "raise", "on_usr1", "note"]),
                (145, AFTER_SECOND),
                (155, &["_start", "main", "note"]),
                (165, AFTER_SECOND),
            ],
        );
    }
}

/// `_start > main > parse > parse > parse`: the recursion the two cleanup tests unwind.
fn into_recursion() -> Vec<Branch> {
    vec![
        START_MAIN,
        (
            120,
            "call",
            (0x401110, "main", 0x10),
            (0x401200, "parse", 0),
        ),
        (
            130,
            "call",
            (0x401230, "parse", 0x30),
            (0x401200, "parse", 0),
        ),
        (
            140,
            "call",
            (0x401230, "parse", 0x30),
            (0x401200, "parse", 0),
        ),
    ]
}

/// The stack `_start > main` with `n` levels of `parse` on it.
fn parses(n: usize) -> Vec<&'static str> {
    let mut s = vec!["_start", "main"];
    s.extend(std::iter::repeat_n("parse", n));
    s
}

/// A recursion whose cleanups each end in `_Unwind_Resume`, reached through its PLT stub
/// (the first call binds it lazily: the stub jumps into `.plt`, which perf names after
/// `_init`, then into ld.so's resolver), with a decode error inside the innermost cleanup.
/// The stub's jumps are no unwind (taken for one, the binder became the root of
/// everything after the gap), and each landing after the gap is in the level above the
/// one that called `_Unwind_Resume`.
#[test]
fn cleanups_after_a_gap_land_one_level_out_through_a_lazily_bound_stub() {
    let resume = |ns: u64, from: Loc, binds: bool, pad: Loc| {
        let mut b: Vec<Branch> = vec![(ns, "call", from, (0x401080, "_Unwind_Resume@plt", 0))];
        if binds {
            b.extend([
                (
                    ns + 1,
                    "jmp",
                    (0x40108b, "_Unwind_Resume@plt", 0xb),
                    (0x401020, "_init", 0x20),
                ),
                (
                    ns + 2,
                    "jmp",
                    (0x401026, "_init", 0x26),
                    (0x7f10, "_dl_runtime_resolve_xsave", 0),
                ),
                (
                    ns + 3,
                    "jmp",
                    (0x7fd6, "_dl_runtime_resolve_xsave", 0xc6),
                    (0x9000, "_Unwind_Resume", 0),
                ),
            ]);
        } else {
            b.push((
                ns + 1,
                "jmp",
                (0x401080, "_Unwind_Resume@plt", 0),
                (0x9000, "_Unwind_Resume", 0),
            ));
        }
        b.push((ns + 5, "jmp", (0x91c3, "_Unwind_Resume", 0x1c3), pad));
        b
    };
    let pad = (0x401241, "parse", 0x41);
    let mut lines: Vec<Line> = as_lines(into_recursion()).collect();
    lines.push(Line::Lost {
        ns: 150,
        resume: (0x401250, "parse", 0x50),
    });
    for (ns, binds, to) in [
        (160, true, pad),
        (180, false, pad),
        (200, false, (0x401160, "main", 0x60)),
    ] {
        let from = (0x40125a, "parse", 0x5a);
        lines.extend(as_lines(resume(ns, from, binds, to)));
    }
    lines.push(Line::Branch(main_returns(240)));
    let got = transcript(&input_text(&lines));
    for (ns, want) in [
        (35, parses(3)),
        (54, [parses(3), vec!["_Unwind_Resume"]].concat()),
        (56, parses(2)),
        (74, [parses(2), vec!["_Unwind_Resume"]].concat()),
        (76, parses(1)),
        (96, parses(0)),
    ] {
        assert_eq!(stack_at(&got, ns), want, "stack at {ns} ns\n{got}");
    }
}

/// Issue 25's second case: a recursion whose every level runs a cleanup ending in
/// `_Unwind_Resume`, with a decode error *inside* the unwinder, so that the segment after
/// the gap begins in `_Unwind_Resume` and its caller (the innermost `parse`) lies beyond
/// what the segment knows. The unwinder never returns into the frame that called it: its
/// jump into `parse`'s pad lands in the next level out (it landed in the caller itself,
/// one `parse` too deep at every later resume until the catch, before the fix).
#[test]
fn a_gap_inside_unwind_resume_still_lands_above_its_caller() {
    let cleanup = |ns: u64, pad: Loc| -> Vec<Branch> {
        vec![
            (
                ns,
                "call",
                (0x40125a, "parse", 0x5a),
                (0x9000, "_Unwind_Resume", 0),
            ),
            (ns + 5, "jmp", (0x91c3, "_Unwind_Resume", 0x1c3), pad),
        ]
    };
    let pad = (0x401241, "parse", 0x41);
    let mut lines: Vec<Line> = as_lines(into_recursion()).collect();
    lines.push(Line::Branch(cleanup(150, pad)[0]));
    lines.push(Line::Lost {
        ns: 152,
        resume: (0x9100, "_Unwind_Resume", 0x100),
    });
    lines.push(Line::Branch((
        160,
        "jmp",
        (0x91c3, "_Unwind_Resume", 0x1c3),
        pad,
    )));
    lines.extend(as_lines(cleanup(170, pad)));
    lines.extend(as_lines(cleanup(190, (0x401160, "main", 0x60))));
    lines.push(Line::Branch(main_returns(240)));
    let got = transcript(&input_text(&lines));
    for (ns, want) in [
        (35, parses(3)),
        (41, [parses(3), vec!["_Unwind_Resume"]].concat()),
        (55, parses(2)),
        (64, [parses(2), vec!["_Unwind_Resume"]].concat()),
        (66, parses(1)),
        (84, [parses(1), vec!["_Unwind_Resume"]].concat()),
        (86, parses(0)),
    ] {
        assert_eq!(stack_at(&got, ns), want, "stack at {ns} ns\n{got}");
    }
}

/// glibc's `mempcpy` jumps into `memmove`'s body (code shared by two functions): in a
/// trace whose root is unknown that may be an unwind past the root, so the writer gives it
/// a segment of its own; nothing lines up with it, and it stays a tail jump, `memmove`
/// starting exactly at the jump (no `[inferred start time]`).
#[test]
fn a_jump_into_code_another_function_shares_stays_a_tail_jump() {
    let lines: Vec<Line> = as_lines([
        (
            110,
            "call",
            (0x401230, "printf_fp", 0x30),
            (0x402000, "mempcpy", 0),
        ),
        (
            120,
            "jmp",
            (0x40200a, "mempcpy", 0xa),
            (0x402107, "memmove", 0x7),
        ),
        (
            130,
            "return",
            (0x402171, "memmove", 0x71),
            (0x401235, "printf_fp", 0x35),
        ),
        (
            140,
            "return",
            (0x401290, "printf_fp", 0x90),
            (0x401535, "vfprintf", 0x35),
        ),
    ])
    .collect();
    let got = transcript(&input_text(&lines));
    assert_stacks(
        "mempcpy into memmove",
        &got,
        &[
            (5, &["vfprintf", "printf_fp", "mempcpy"]),
            (15, &["vfprintf", "printf_fp", "memmove"]),
            (25, &["vfprintf", "printf_fp"]),
        ],
    );
    assert!(got.contains("BEGIN memmove\n"), "{got}");
}

/// `_start > main > raise > pthread_kill`, whose `kill` syscall is interrupted by
/// `SIGUSR1`: tracing resumes at the first byte of the handler `on_usr1` (the start of
/// both signal tests below).
fn into_handler() -> Vec<Branch> {
    vec![
        START_MAIN,
        (
            120,
            "call",
            (0x401110, "main", 0x10),
            (0x401300, "raise", 0),
        ),
        (
            130,
            "call",
            (0x401310, "raise", 0x10),
            (0x401400, "pthread_kill", 0),
        ),
        (
            140,
            "tr end  syscall",
            (0x40140a, "pthread_kill", 0xa),
            (0, "", 0),
        ),
        (200, "tr strt", (0, "", 0), (0x401700, "on_usr1", 0)),
    ]
}

/// The handler `on_usr1`, from `ns`: it calls `note`, returns into the signal trampoline
/// `__restore_rt`, whose `rt_sigreturn` ends tracing (`ns + 30`).
fn handler(ns: u64) -> [Branch; 4] {
    [
        (
            ns,
            "call",
            (0x401710, "on_usr1", 0x10),
            (0x401600, "note", 0),
        ),
        (
            ns + 10,
            "return",
            (0x401640, "note", 0x40),
            (0x401715, "on_usr1", 0x15),
        ),
        (
            ns + 20,
            "return",
            (0x401740, "on_usr1", 0x40),
            (0x401800, "__restore_rt", 0),
        ),
        (
            ns + 30,
            "tr end  syscall",
            (0x401807, "__restore_rt", 0x7),
            (0, "", 0),
        ),
    ]
}

/// Tracing resumes at `ns` in `pthread_kill` after the signal's `rt_sigreturn`, which
/// returns to `raise`, and `raise` to `main`.
fn back_in_main(ns: u64) -> [Branch; 3] {
    [
        (ns, "tr strt", (0, "", 0), (0x40140c, "pthread_kill", 0xc)),
        (
            ns + 10,
            "return",
            (0x401420, "pthread_kill", 0x20),
            (0x401315, "raise", 0x15),
        ),
        (
            ns + 20,
            "return",
            (0x401320, "raise", 0x20),
            (0x401115, "main", 0x15),
        ),
    ]
}

/// A decode error between a handler's return into the signal trampoline and the
/// trampoline's `rt_sigreturn`: after the gap the trampoline is all the segment knows,
/// and tracing resumes in the code the signal interrupted, the frame the trampoline ran
/// on. That frame becomes its caller and the stack lines up with the one before the gap
/// (taken for a new delivery, the interrupted function was shown as a handler on top of
/// the trampoline for the rest of the run: the C signals program at 87 %).
#[test]
fn a_gap_before_rt_sigreturn_returns_to_the_interrupted_frame() {
    let mut lines: Vec<Line> = as_lines(into_handler().into_iter().chain(handler(210))).collect();
    // The gap: after the return into the trampoline, before its `rt_sigreturn`.
    lines.insert(
        lines.len() - 1,
        Line::Lost {
            ns: 230,
            resume: (0x401807, "__restore_rt", 0x7),
        },
    );
    lines.extend(as_lines(back_in_main(300)));
    lines.extend(as_lines([
        (330, "call", (0x401120, "main", 0x20), (0x401600, "note", 0)),
        (
            340,
            "return",
            (0x401640, "note", 0x40),
            (0x401125, "main", 0x25),
        ),
        main_returns(350),
    ]));
    let got = transcript(&input_text(&lines));
    let kill: &[&str] = &["_start", "main", "raise", "pthread_kill"];
    assert_stacks(
        "gap before rt_sigreturn",
        &got,
        &[
            (25, kill),
            (95, &["_start", "main", "raise", "pthread_kill", "on_usr1"]),
            (
                105,
                &["_start", "main", "raise", "pthread_kill", "on_usr1", "note"],
            ),
            (
                125,
                &["_start", "main", "raise", "pthread_kill", "__restore_rt"],
            ),
            (195, kill),
            (205, &["_start", "main", "raise"]),
            (225, &["_start", "main", "note"]),
            (235, &["_start", "main"]),
        ],
    );
}

/// A decode error inside a handler, and a pending signal delivered as that handler's
/// `rt_sigreturn` returns: after the gap the handler's return onto the trampoline is the
/// segment's root (a label), and the next `tr strt` is the second handler's first byte,
/// not the interrupted code. The second handler runs on the interrupted frame; its own
/// `rt_sigreturn` names that frame (it was one `on_usr1` level too deep: the C signals
/// program's placements at 88-99 %).
#[test]
fn a_gap_in_a_handler_then_a_pending_signal_stays_on_the_interrupted_frame() {
    let mut lines: Vec<Line> = as_lines(into_handler()).collect();
    lines.push(Line::Lost {
        ns: 205,
        resume: (0x401720, "on_usr1", 0x20),
    });
    let mut rest = handler(220).to_vec();
    rest.push((300, "tr strt", (0, "", 0), (0x401700, "on_usr1", 0)));
    rest.extend(handler(310));
    rest.extend(back_in_main(400));
    rest.push(main_returns(430));
    lines.extend(as_lines(rest));
    let got = transcript(&input_text(&lines));
    let kill: &[&str] = &["_start", "main", "raise", "pthread_kill"];
    assert_stacks(
        "pending signal after a gap in a handler",
        &got,
        &[
            (92, &["_start", "main", "raise", "pthread_kill", "on_usr1"]),
            (
                115,
                &["_start", "main", "raise", "pthread_kill", "on_usr1", "note"],
            ),
            (
                135,
                &["_start", "main", "raise", "pthread_kill", "__restore_rt"],
            ),
            (195, &["_start", "main", "raise", "pthread_kill", "on_usr1"]),
            (
                205,
                &["_start", "main", "raise", "pthread_kill", "on_usr1", "note"],
            ),
            (
                225,
                &["_start", "main", "raise", "pthread_kill", "__restore_rt"],
            ),
            (295, kill),
            (305, &["_start", "main", "raise"]),
        ],
    );
}

/// After a gap, a segment lined up with the open stack by one name (`c`) returns past
/// its own root into a function no open frame runs (`x`): the line-up was a coincidence
/// or the gap hid the frames between, so `x` lies somewhere under `c`, above the frames
/// carried across the gap. They stay under it (marked unverified), as they do when
/// nothing lines up after a gap; closing them lost the thread's root for the rest of the
/// run (`unwind_jumps_gaps` seed 15: root 87.50 -> 73.57 %).
#[test]
fn a_return_past_a_segment_lined_up_across_a_gap_keeps_the_root() {
    let mut lines: Vec<Line> = as_lines([
        START_MAIN,
        (120, "call", (0x401110, "main", 0x10), (0x401200, "a", 0)),
        (130, "call", (0x401210, "a", 0x10), (0x401400, "c", 0)),
    ])
    .collect();
    lines.push(Line::Lost {
        ns: 140,
        resume: (0x401420, "c", 0x20),
    });
    lines.extend(as_lines([
        (150, "call", (0x401430, "c", 0x30), (0x401500, "d", 0)),
        // Not back into `c` (its caller): into `x`, which no open frame runs.
        (160, "return", (0x401540, "d", 0x40), (0x401715, "x", 0x15)),
        (170, "call", (0x401720, "x", 0x20), (0x401600, "e", 0)),
        (180, "return", (0x401640, "e", 0x40), (0x401725, "x", 0x25)),
        (190, "call", (0x401730, "x", 0x30), (0x401600, "e", 0)),
    ]));
    let got = transcript(&input_text(&lines));
    assert_stacks(
        "return past a segment lined up across a gap",
        &got,
        &[
            (25, &["_start", "main", "a", "c"]),
            (45, &["_start", "main", "a", "c", "d"]),
            (55, &["_start", "main", "a", "x"]),
            (65, &["_start", "main", "a", "x", "e"]),
            (75, &["_start", "main", "a", "x"]),
        ],
    );
}

/// Two gaps of a burst hide when a frame returned, and the trace cannot tell (issue 25,
/// `storm_bursts` seeds 14 and 15 in FIDELITY.md). `_start > main > h > m`; a gap; a short
/// segment in `f` (it calls `g`, never returns); a gap; then `h` runs and returns into
/// `main`. Two executions give this very input: (A) `m` returned in the first gap and
/// `h` called `f`, (B) `m` called `f` in the first gap and both returned in the second.
/// The writer carries `m` under `f` (right for B, wrong for A: what it does when nothing
/// lines up, right far more often than not). With `mark_unknown_frames`, the frames the
/// burst does not prove (`m`: the last segment lines up with `_start > main > h` only)
/// give way to the marker frame, which is right for both; frames the burst proves stay.
#[test]
fn frames_a_burst_does_not_prove_give_way_to_the_marker_frame() {
    let lines = [
        Line::Branch(START_MAIN),
        Line::Branch((120, "call", (0x401110, "main", 0x10), (0x401200, "h", 0))),
        Line::Branch((130, "call", (0x401210, "h", 0x10), (0x401300, "m", 0))),
        Line::Lost {
            ns: 140,
            resume: (0x401410, "f", 0x10),
        },
        Line::Branch((150, "call", (0x401420, "f", 0x20), (0x401500, "g", 0))),
        Line::Branch((160, "return", (0x401510, "g", 0x10), (0x401425, "f", 0x25))),
        Line::Lost {
            ns: 170,
            resume: (0x401240, "h", 0x40),
        },
        Line::Branch((180, "call", (0x401250, "h", 0x50), (0x401600, "k", 0))),
        Line::Branch((190, "return", (0x401610, "k", 0x10), (0x401255, "h", 0x55))),
        Line::Branch((
            200,
            "return",
            (0x401290, "h", 0x90),
            (0x401115, "main", 0x15),
        )),
        Line::Branch(main_returns(210)),
    ];
    let text = input_text(&lines);
    const MARKER: &str = ptscope_stacks::UNKNOWN_FRAMES_MARKER;
    // Times after the first event (110 ns): in `m`, in `g` (the short segment), in `k`.
    assert_stacks(
        "carried",
        &transcript(&text),
        &[
            (25, &["_start", "main", "h", "m"]),
            (45, &["_start", "main", "h", "m", "f", "g"]),
            (75, &["_start", "main", "h", "k"]),
        ],
    );
    let marked = transcript_with(&text, true);
    assert_stacks(
        "marked",
        &marked,
        &[
            (25, &["_start", "main", "h", "m"]),
            (45, &["_start", "main", "h", MARKER, "f", "g"]),
            (75, &["_start", "main", "h", "k"]),
        ],
    );
    assert_eq!(marked.matches(MARKER).count(), 2, "one slice:\n{marked}");
}

/// After a gap, a segment lines up with nothing and is carried on the open frames; its
/// leaf then jumps into the middle of a function no frame runs (`p`'s callee `q`), and
/// `p` jumps on into `s`, whose returns reveal `main > a` below it (sqlite3 under
/// simulated PT: an overflow in `sqlite3_free`, then two such jumps out of frames whose
/// callers the gap hid; `realworld_sim::sqlite3_queries_with_faults`). Neither jump's
/// segment lines up for sure with the frames open before it, but the second's shows
/// `_start > main > a` still running: they stay under both. Closing every open frame at
/// each jump rooted the rest of the run at `main`, `_start` lost.
#[test]
fn jumps_out_of_frames_a_gap_hid_keep_the_frames_a_later_segment_shows() {
    let mut lines: Vec<Line> = as_lines([
        START_MAIN,
        (120, "call", (0x401110, "main", 0x10), (0x401200, "a", 0)),
        (130, "call", (0x401210, "a", 0x10), (0x401300, "b", 0)),
        (135, "call", (0x401310, "b", 0x10), (0x401400, "c", 0)),
    ])
    .collect();
    lines.push(Line::Lost {
        ns: 140,
        resume: (0x401810, "f", 0x10),
    });
    lines.extend(as_lines([
        (150, "call", (0x401820, "f", 0x20), (0x401900, "g", 0)),
        // Into the middle of `q`, which no open frame runs; `q` returns into `p`.
        (160, "jmp", (0x401910, "g", 0x10), (0x401b40, "q", 0x40)),
        (170, "return", (0x401b50, "q", 0x50), (0x401a25, "p", 0x25)),
        // Into the middle of `s`, whose returns reveal `t`, `a` and `main` below it.
        (180, "jmp", (0x401a30, "p", 0x30), (0x401c30, "s", 0x30)),
        (190, "return", (0x401c40, "s", 0x40), (0x401d15, "t", 0x15)),
        (200, "return", (0x401d20, "t", 0x20), (0x401225, "a", 0x25)),
        (
            210,
            "return",
            (0x401230, "a", 0x30),
            (0x401135, "main", 0x35),
        ),
        (220, "call", (0x401140, "main", 0x40), (0x401600, "e", 0)),
    ]));
    let got = transcript(&input_text(&lines));
    assert_stacks(
        "jumps out of frames a gap hid",
        &got,
        &[
            (27, &["_start", "main", "a", "b", "c"]),
            (45, &["_start", "main", "a", "b", "c", "f", "g"]),
            (55, &["_start", "main", "a", "p", "q"]),
            (65, &["_start", "main", "a", "p"]),
            (75, &["_start", "main", "a", "t", "s"]),
            (85, &["_start", "main", "a", "t"]),
            (95, &["_start", "main", "a"]),
            (105, &["_start", "main"]),
        ],
    );
}

/// In a direct recursion (`r > r`) a short segment of a burst that lines up by the one
/// name `r` may continue either level: the inner one (as the writer guesses) or the outer
/// one, the inner having returned in the gap (`storm_bursts` seed 4 in FIDELITY.md). With
/// `mark_unknown_frames` both levels give way to the marker frame (the outer level or
/// nothing) under the segment's `r`, unless a later segment lines up with both levels.
#[test]
fn a_burst_lined_up_inside_a_recursion_marks_the_level_it_does_not_know() {
    let burst = |then: &[Line]| {
        let mut lines = vec![
            Line::Branch(START_MAIN),
            Line::Branch((120, "call", (0x401110, "main", 0x10), (0x401200, "h", 0))),
            Line::Branch((130, "call", (0x401210, "h", 0x10), (0x401300, "r", 0))),
            Line::Branch((135, "call", (0x401310, "r", 0x10), (0x401300, "r", 0))),
            Line::Branch((138, "call", (0x401320, "r", 0x20), (0x401400, "k", 0))),
            Line::Lost {
                ns: 140,
                resume: (0x401330, "r", 0x30),
            },
            Line::Branch((150, "call", (0x401340, "r", 0x40), (0x401500, "g", 0))),
            Line::Branch((160, "return", (0x401510, "g", 0x10), (0x401345, "r", 0x45))),
        ];
        lines.extend_from_slice(then);
        input_text(&lines)
    };
    const MARKER: &str = ptscope_stacks::UNKNOWN_FRAMES_MARKER;
    // The next segment runs in `h` and returns into `main`: nothing says which `r` ran `g`.
    let in_h = burst(&[
        Line::Lost {
            ns: 170,
            resume: (0x401240, "h", 0x40),
        },
        Line::Branch((180, "call", (0x401250, "h", 0x50), (0x401600, "k", 0))),
        Line::Branch((190, "return", (0x401610, "k", 0x10), (0x401255, "h", 0x55))),
        Line::Branch((
            200,
            "return",
            (0x401290, "h", 0x90),
            (0x401115, "main", 0x15),
        )),
        Line::Branch(main_returns(210)),
    ]);
    let carried = &["_start", "main", "h", "r", "r", "g"];
    assert_stacks("carried", &transcript(&in_h), &[(45, carried)]);
    let marked = transcript_with(&in_h, true);
    assert_stacks(
        "marked",
        &marked,
        &[
            (26, &["_start", "main", "h", "r", "r"]),
            (45, &["_start", "main", "h", MARKER, "r", "g"]),
            (75, &["_start", "main", "h", "k"]),
        ],
    );
    // A later segment returns from the inner `r` into the outer one, then into `h`: both
    // levels were still running under `g`.
    let both = burst(&[
        Line::Lost {
            ns: 164,
            resume: (0x401710, "q", 0x10),
        },
        Line::Lost {
            ns: 170,
            resume: (0x401350, "r", 0x50),
        },
        Line::Branch((180, "return", (0x401360, "r", 0x60), (0x401315, "r", 0x15))),
        Line::Branch((190, "return", (0x401360, "r", 0x60), (0x401215, "h", 0x15))),
        Line::Branch((
            200,
            "return",
            (0x401290, "h", 0x90),
            (0x401115, "main", 0x15),
        )),
        Line::Branch(main_returns(210)),
    ]);
    assert_stacks("proven", &transcript_with(&both, true), &[(45, carried)]);
}

/// A snapshot that starts in `b` (`_start > main > a > b`, the first segment learns only
/// `a > b`), then a burst: a gap, a short segment in `q` that lines up with nothing, a
/// gap, and a segment whose returns reveal `_start > main > a > b`. That later stack
/// holds the first segment's whole stack above `_start > main`: they ran below it all
/// along, though the short segment between (what the gap called, carried on top) shows
/// none of it. Before, only the next segment was searched for a stack that holds the
/// earlier one, and the first segment stayed rootless (`snapshot_gaps_bursts` seed 4:
/// root 94.73 -> 100 %).
#[test]
fn a_root_found_after_a_burst_reaches_the_segment_before_it() {
    let mut lines: Vec<Line> = as_lines([
        (100, "call", (0x401310, "b", 0x10), (0x401400, "c", 0)),
        (110, "return", (0x401420, "c", 0x20), (0x401315, "b", 0x15)),
    ])
    .collect();
    // Long enough not to count as a segment of the burst itself.
    for i in 0..8u64 {
        lines.extend(as_lines([
            (
                120 + 20 * i,
                "call",
                (0x401320, "b", 0x20),
                (0x401600, "e", 0),
            ),
            (
                130 + 20 * i,
                "return",
                (0x401610, "e", 0x10),
                (0x401325, "b", 0x25),
            ),
        ]));
    }
    lines.extend(as_lines([
        (280, "return", (0x401340, "b", 0x40), (0x401215, "a", 0x15)),
        (290, "call", (0x401220, "a", 0x20), (0x401300, "b", 0)),
    ]));
    lines.push(Line::Lost {
        ns: 300,
        resume: (0x401710, "q", 0x10),
    });
    lines.extend(as_lines([(
        310,
        "call",
        (0x401720, "q", 0x20),
        (0x401800, "r", 0),
    )]));
    lines.push(Line::Lost {
        ns: 320,
        resume: (0x401350, "b", 0x50),
    });
    lines.extend(as_lines([
        (330, "return", (0x401360, "b", 0x60), (0x401225, "a", 0x25)),
        (
            340,
            "return",
            (0x401230, "a", 0x30),
            (0x401144, "main", 0x44),
        ),
        main_returns(350),
    ]));
    let got = transcript(&input_text(&lines));
    assert_stacks(
        "a root found after a burst",
        &got,
        &[
            (5, &["_start", "main", "a", "b", "c"]),
            (15, &["_start", "main", "a", "b"]),
            (25, &["_start", "main", "a", "b", "e"]),
            (185, &["_start", "main", "a"]),
            (195, &["_start", "main", "a", "b"]),
            (235, &["_start", "main", "a"]),
            (245, &["_start", "main"]),
        ],
    );
}

/// After a gap nothing lines up (`m`, carried on `_start > main > a > c`), and `m`'s
/// callee `r` returns straight into `x`, which no open frame runs (a hand-written
/// unwinder's `ret` into a saved frame); `x`'s returns then reveal `_start > main > a`
/// below it. That landing shows those frames running through the gap: with
/// `mark_unknown_frames` only `c`, which nothing later shows, gives way to the marker.
/// Before, the search for such proof stopped at the landing, the marker stood for
/// everything above `_start` and the landing, lining up with none of it, stayed on the
/// marker for the rest of the run (`realworld_sim::c_hand_written_unwinds` with late
/// faults: 69.16 % exact outside gaps against 99.99 % carried).
#[test]
fn a_landing_after_a_gap_proves_the_frames_it_lines_up_with() {
    let mut lines: Vec<Line> = as_lines([
        START_MAIN,
        (120, "call", (0x401110, "main", 0x10), (0x401200, "a", 0)),
        (130, "call", (0x401210, "a", 0x10), (0x401400, "c", 0)),
    ])
    .collect();
    lines.push(Line::Lost {
        ns: 140,
        resume: (0x401810, "m", 0x10),
    });
    lines.extend(as_lines([
        (150, "call", (0x401820, "m", 0x20), (0x401900, "r", 0)),
        // Not back into `m`: into `x`'s body, past everything the segment knows.
        (160, "return", (0x401910, "r", 0x10), (0x401715, "x", 0x15)),
        (170, "call", (0x401720, "x", 0x20), (0x401600, "e", 0)),
        (180, "return", (0x401640, "e", 0x40), (0x401725, "x", 0x25)),
        (190, "return", (0x401730, "x", 0x30), (0x401225, "a", 0x25)),
        (
            200,
            "return",
            (0x401230, "a", 0x30),
            (0x401115, "main", 0x15),
        ),
        main_returns(210),
    ]));
    let text = input_text(&lines);
    const MARKER: &str = ptscope_stacks::UNKNOWN_FRAMES_MARKER;
    // Times after the first event (110 ns).
    let after: &[Expected] = &[
        (55, &["_start", "main", "a", "x"]),
        (65, &["_start", "main", "a", "x", "e"]),
        (85, &["_start", "main", "a"]),
        (95, &["_start", "main"]),
    ];
    let carried = transcript(&text);
    assert_stacks(
        "carried",
        &carried,
        &[(45, &["_start", "main", "a", "c", "m", "r"])],
    );
    assert_stacks("carried", &carried, after);
    let marked = transcript_with(&text, true);
    assert_stacks("marked", &marked, &[(25, &["_start", "main", "a", "c"])]);
    assert_stacks(
        "marked",
        &marked,
        &[(45, &["_start", "main", "a", MARKER, "m", "r"])],
    );
    assert_stacks("marked", &marked, after);
}
