//! Frames and stacks as handles: every frame name is stored once, every stack is a node
//! of a trie (its top frame and a link to the stack under it), so a stack is one `u32`.
//!
//! The scorer compares millions of stacks; as `Vec<String>` they cost kilobytes each
//! (19 KB per event for C++ names), as handles a few bytes. Two stacks are equal exactly
//! when their handles are (the trie has one node per distinct stack), and the checks the
//! score needs (a suffix, the root, a frame on the stack) walk the links.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A frame name's handle in a [`Names`].
pub type FrameId = u32;

/// A stack's handle in a [`Names`]; [`EMPTY`] is the stack without frames.
pub type StackId = u32;

/// The empty stack.
pub const EMPTY: StackId = 0;

/// A multiply-rotate hash for small integer keys: the trie is looked up at every stack
/// change, and SipHash's resistance to chosen keys buys nothing for our own handles.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// A map keyed by handles, hashed with [`IdHasher`].
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

#[derive(Clone, Copy, Debug)]
struct Node {
    /// The stack under this one (without its top frame).
    parent: StackId,
    /// Its top frame.
    frame: FrameId,
    /// Number of frames.
    depth: u32,
    /// Its outermost frame.
    root: FrameId,
}

/// Interned frame names and stacks.
#[derive(Clone, Debug)]
pub struct Names {
    frame_ids: HashMap<Box<str>, FrameId>,
    frames: Vec<Box<str>>,
    /// `nodes[EMPTY]` is a placeholder for the empty stack.
    nodes: Vec<Node>,
    children: IdMap<(StackId, FrameId), StackId>,
}

impl Default for Names {
    fn default() -> Self {
        Self::new()
    }
}

/// The frame `name` stands for: every PLT stub is `_init` (see [`Names::frame`]).
fn frame_key(name: &str) -> &str {
    if name.ends_with("@plt") {
        "_init"
    } else {
        name
    }
}

impl Names {
    /// No names; only the empty stack.
    pub fn new() -> Self {
        Names {
            frame_ids: HashMap::new(),
            frames: Vec::new(),
            nodes: vec![Node {
                parent: EMPTY,
                frame: FrameId::MAX,
                depth: 0,
                root: FrameId::MAX,
            }],
            children: IdMap::default(),
        }
    }

    /// The handle of frame name `name`, adding it if new.
    ///
    /// A PLT stub is one frame, `_init`, whatever its name: perf names a stub
    /// `NAME@plt` or after `_init` (the sizeless symbol it stretches over `.plt`)
    /// depending on the shape of its symbol tree, the truth inherits perf's names, and
    /// ptscope's own decoder always says `NAME@plt`.
    pub fn frame(&mut self, name: &str) -> FrameId {
        let name = frame_key(name);
        if let Some(&id) = self.frame_ids.get(name) {
            return id;
        }
        let id = self.frames.len() as FrameId;
        self.frames.push(name.into());
        self.frame_ids.insert(name.into(), id);
        id
    }

    /// The handle of `name` if it was ever added.
    pub fn find_frame(&self, name: &str) -> Option<FrameId> {
        let name = frame_key(name);
        self.frame_ids.get(name).copied()
    }

    /// The name of frame `id` (`"?"` for a handle from another table).
    pub fn frame_name(&self, id: FrameId) -> &str {
        self.frames.get(id as usize).map_or("?", |s| s)
    }

    /// The stack `under` with `frame` pushed on top.
    pub fn push(&mut self, under: StackId, frame: FrameId) -> StackId {
        if let Some(&id) = self.children.get(&(under, frame)) {
            return id;
        }
        let below = self.node(under);
        let id = self.nodes.len() as StackId;
        self.nodes.push(Node {
            parent: under,
            frame,
            depth: below.depth + 1,
            root: if under == EMPTY { frame } else { below.root },
        });
        self.children.insert((under, frame), id);
        id
    }

    /// The handle of the stack `frames` (root first).
    pub fn stack<S: AsRef<str>>(&mut self, frames: &[S]) -> StackId {
        frames.iter().fold(EMPTY, |under, f| {
            let f = self.frame(f.as_ref());
            self.push(under, f)
        })
    }

    fn node(&self, s: StackId) -> Node {
        self.nodes.get(s as usize).copied().unwrap_or(self.nodes[0])
    }

    /// The stack under `s` (`EMPTY` for the empty stack).
    pub fn parent(&self, s: StackId) -> StackId {
        self.node(s).parent
    }

    /// The top frame of `s`, `None` for the empty stack.
    pub fn top(&self, s: StackId) -> Option<FrameId> {
        (s != EMPTY).then(|| self.node(s).frame)
    }

    /// The outermost frame of `s`, `None` for the empty stack.
    pub fn root(&self, s: StackId) -> Option<FrameId> {
        (s != EMPTY).then(|| self.node(s).root)
    }

    /// Number of frames of `s`.
    pub fn depth(&self, s: StackId) -> usize {
        self.node(s).depth as usize
    }

    /// The frames of `s`, root first.
    pub fn frames(&self, s: StackId) -> Vec<FrameId> {
        let mut v = Vec::with_capacity(self.depth(s));
        let mut at = s;
        while at != EMPTY {
            let n = self.node(at);
            v.push(n.frame);
            at = n.parent;
        }
        v.reverse();
        v
    }

    /// The frame names of `s`, root first.
    pub fn names(&self, s: StackId) -> Vec<String> {
        self.frames(s)
            .into_iter()
            .map(|f| self.frame_name(f).to_string())
            .collect()
    }

    /// `whole` ends with `tail`: `tail` is `whole` without some of its outermost frames
    /// (as `[T]::ends_with` on root-first vectors; every stack ends with the empty one).
    pub fn ends_with(&self, whole: StackId, tail: StackId) -> bool {
        let (mut w, mut t) = (whole, tail);
        let (dw, dt) = (self.depth(w), self.depth(t));
        if dt > dw {
            return false;
        }
        for _ in 0..dt {
            if w == t {
                return true;
            }
            let (nw, nt) = (self.node(w), self.node(t));
            if nw.frame != nt.frame {
                return false;
            }
            w = nw.parent;
            t = nt.parent;
        }
        true
    }

    /// Frame `f` is somewhere on `s`.
    pub fn contains(&self, s: StackId, f: FrameId) -> bool {
        let mut at = s;
        while at != EMPTY {
            let n = self.node(at);
            if n.frame == f {
                return true;
            }
            at = n.parent;
        }
        false
    }

    /// Number of frame names (handles are `0..frame_count()`).
    pub fn frame_count(&self) -> usize {
        self.frames.len()
    }

    /// Distinct stacks interned (the empty one included).
    pub fn stacks(&self) -> usize {
        self.nodes.len()
    }
}

/// Interns a stack given one name at a time, reusing the nodes of the previous stack it
/// shares a prefix with: replaying millions of steps, only the changed top is looked up.
///
/// Names can be renamed on the way in ([`StackBuilder::renaming`]): the rule runs once
/// per distinct name given, and the previous stack is compared by the names as given.
#[derive(Default)]
pub struct StackBuilder<'r> {
    /// The previous stack's node at each depth, with the handle (in `given`) of the name
    /// it was given there.
    path: Vec<(StackId, u32)>,
    /// Every name given, once, and the frame it became.
    given: HashMap<Box<str>, u32>,
    given_names: Vec<Box<str>>,
    frame_of: Vec<FrameId>,
    /// What a name becomes (`None`: itself).
    rename: Option<Box<Rename<'r>>>,
}

/// A renaming rule for [`StackBuilder::renaming`].
pub type Rename<'r> = dyn FnMut(&str) -> Option<String> + 'r;

impl std::fmt::Debug for StackBuilder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackBuilder")
            .field("depth", &self.path.len())
            .field("names", &self.given_names.len())
            .field("renaming", &self.rename.is_some())
            .finish()
    }
}

impl<'r> StackBuilder<'r> {
    /// A builder that interns each name given as `rename` says (`None`: unchanged);
    /// `rename` runs once per distinct name.
    pub fn renaming(rename: impl FnMut(&str) -> Option<String> + 'r) -> Self {
        StackBuilder {
            rename: Some(Box::new(rename)),
            ..StackBuilder::default()
        }
    }

    /// The frame the name `name` becomes in `names`.
    fn given(&mut self, names: &mut Names, name: &str) -> u32 {
        if let Some(&g) = self.given.get(name) {
            return g;
        }
        let renamed = self.rename.as_mut().and_then(|r| r(name));
        let frame = names.frame(renamed.as_deref().unwrap_or(name));
        let g = self.given_names.len() as u32;
        self.given_names.push(name.into());
        self.given.insert(name.into(), g);
        self.frame_of.push(frame);
        g
    }

    /// The handle of the stack `frames` (root first), each renamed.
    pub fn intern<'a>(
        &mut self,
        names: &mut Names,
        frames: impl IntoIterator<Item = &'a str>,
    ) -> StackId {
        let mut node = EMPTY;
        let mut depth = 0;
        for name in frames {
            match self.path.get(depth) {
                Some(&(same, g)) if &*self.given_names[g as usize] == name => node = same,
                _ => {
                    self.path.truncate(depth);
                    let g = self.given(names, name);
                    node = names.push(node, self.frame_of[g as usize]);
                    self.path.push((node, g));
                }
            }
            depth += 1;
        }
        self.path.truncate(depth);
        node
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_are_equal_exactly_when_their_frames_are() {
        let mut n = Names::new();
        let a = n.stack(&["main", "f", "g"]);
        let b = n.stack(&["main", "f", "g"]);
        let c = n.stack(&["main", "g"]);
        let empty: [&str; 0] = [];
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(n.stack(&empty), EMPTY);
        assert_eq!(n.names(a), ["main", "f", "g"]);
        assert_eq!(n.depth(a), 3);
        assert_eq!(n.root(a), n.find_frame("main"));
        assert_eq!(n.root(EMPTY), None);
        let fg = n.stack(&["f", "g"]);
        let g = n.stack(&["g"]);
        assert!(n.ends_with(a, fg) && n.ends_with(a, g) && n.ends_with(a, a));
        assert!(n.ends_with(a, EMPTY) && n.ends_with(c, g));
        assert!(!n.ends_with(fg, a) && !n.ends_with(a, c));
        let f = n.find_frame("f").unwrap();
        assert!(n.contains(a, f) && !n.contains(c, f) && !n.contains(EMPTY, f));
        let mut sb = StackBuilder::default();
        assert_eq!(sb.intern(&mut n, ["main", "f", "g"]), a);
        assert_eq!(sb.intern(&mut n, ["main", "g"]), c);
        assert_eq!(sb.intern(&mut n, ["main", "f", "g"]), a);
        assert_eq!(sb.intern(&mut n, []), EMPTY);
    }

    #[test]
    fn a_renaming_builder_names_each_frame_once_and_compares_stacks_by_the_new_names() {
        let mut n = Names::new();
        let mut asked = Vec::new();
        let mut sb = StackBuilder::renaming(|name: &str| {
            asked.push(name.to_string());
            name.strip_prefix("@").map(|_| "f".to_string())
        });
        let a = sb.intern(&mut n, ["main", "@1", "g"]);
        let b = sb.intern(&mut n, ["main", "@2", "g"]);
        let c = sb.intern(&mut n, ["main", "@1"]);
        let d = sb.intern(&mut n, ["main", "@2", "g"]);
        drop(sb);
        // Two addresses in one function are one frame.
        assert_eq!(a, b);
        assert_eq!(b, d);
        assert_eq!(n.names(a), ["main", "f", "g"]);
        assert_eq!(n.names(c), ["main", "f"]);
        assert_eq!(asked, ["main", "@1", "g", "@2"]);
    }
}
