//! The OCaml exception-handler note `.note.ocaml_eh`.

use object::{Object, ObjectSection};
use ptscope_event::OcamlExceptionInfo;

use crate::elf::Elf;
use crate::error::{Error, Result};

/// Trap addresses from `.note.ocaml_eh`, as link-time addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OcamlTraps {
    /// Exception handler entry points.
    pub entertraps: Vec<u64>,
    /// Instructions that push a handler.
    pub pushtraps: Vec<u64>,
    /// Instructions that pop a handler.
    pub poptraps: Vec<u64>,
}

impl OcamlTraps {
    /// The same traps shifted by a load bias (see [`crate::ProcMaps::load_bias`]).
    pub fn rebased(&self, bias: u64) -> Self {
        let shift = |v: &[u64]| v.iter().map(|a| a.wrapping_add(bias)).collect();
        OcamlTraps {
            entertraps: shift(&self.entertraps),
            pushtraps: shift(&self.pushtraps),
            poptraps: shift(&self.poptraps),
        }
    }

    /// The table the stack writers use.
    pub fn to_exception_info(&self) -> OcamlExceptionInfo {
        OcamlExceptionInfo::new(&self.pushtraps, &self.poptraps, &self.entertraps)
    }
}

const NOTE_NAME: &[u8] = b"OCaml";
const NOTE_TYPE: u32 = 1;

impl Elf<'_> {
    /// Reads `.note.ocaml_eh` (owner `OCaml`, type 1): a recorded base address, then three
    /// 0-terminated u64 lists (entertraps, pushtraps, poptraps).
    ///
    /// Like SystemTap probes, the addresses are fixed up by `.stapsdt.base`'s actual address
    /// minus the recorded base, which is non-zero only if the file was moved after linking
    /// (prelink). Without a `.stapsdt.base` section no fix-up is applied.
    pub fn ocaml_traps(&self) -> Result<OcamlTraps> {
        let file = self.object();
        let path = self.path();
        let bad = |d: String| Error::malformed(path, ".note.ocaml_eh", d);
        let section = file
            .section_by_name(".note.ocaml_eh")
            .ok_or_else(|| Error::NoOcamlNote {
                path: path.to_path_buf(),
            })?;
        let data = section.data().map_err(|source| Error::Elf {
            path: path.to_path_buf(),
            source,
        })?;
        let little = file.is_little_endian();
        // gABI says 4; some producers use 8 for 64-bit notes and say so in sh_addralign.
        let align = if section.align() == 8 { 8 } else { 4 };
        let desc = find_note(data, little, align)
            .map_err(bad)?
            .ok_or_else(|| Error::NoOcamlNote {
                path: path.to_path_buf(),
            })?;
        if desc.len() % 8 != 0 {
            return Err(bad(format!(
                "descriptor length {} is not a multiple of 8",
                desc.len()
            )));
        }
        let words: Vec<u64> = desc
            .chunks_exact(8)
            .map(|c| {
                let b: [u8; 8] = [c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]];
                if little {
                    u64::from_le_bytes(b)
                } else {
                    u64::from_be_bytes(b)
                }
            })
            .collect();
        let (&recorded_base, mut rest) = words
            .split_first()
            .ok_or_else(|| bad("empty descriptor".into()))?;
        let reloc = match self.section_address(".stapsdt.base") {
            Some(actual) => actual.wrapping_sub(recorded_base),
            None => 0,
        };
        let mut lists: [Vec<u64>; 3] = Default::default();
        for (k, list) in lists.iter_mut().enumerate() {
            let end = rest
                .iter()
                .position(|&w| w == 0)
                .ok_or_else(|| bad(format!("list {} is not 0-terminated", k + 1)))?;
            *list = rest[..end].iter().map(|a| a.wrapping_add(reloc)).collect();
            rest = &rest[end + 1..];
        }
        let [entertraps, pushtraps, poptraps] = lists;
        Ok(OcamlTraps {
            entertraps,
            pushtraps,
            poptraps,
        })
    }
}

/// The descriptor of the first `OCaml`/1 note in a note section.
fn find_note(mut data: &[u8], little: bool, align: usize) -> Result<Option<&[u8]>, String> {
    let u32_at = |b: &[u8], i: usize| -> u32 {
        let w = [b[i], b[i + 1], b[i + 2], b[i + 3]];
        if little {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        }
    };
    let pad = |n: usize| n.div_ceil(align) * align;
    while !data.is_empty() {
        if data.len() < 12 {
            return Err(format!(
                "{} trailing bytes, too short for a note header",
                data.len()
            ));
        }
        let namesz = u32_at(data, 0) as usize;
        let descsz = u32_at(data, 4) as usize;
        let ntype = u32_at(data, 8);
        let name_end = 12usize.saturating_add(namesz);
        let desc_start = 12usize.saturating_add(pad(namesz));
        let desc_end = desc_start.saturating_add(descsz);
        if desc_end > data.len() || name_end > data.len() {
            return Err(format!(
                "note (namesz {namesz}, descsz {descsz}) overruns the section"
            ));
        }
        let name = &data[12..name_end];
        let name = name.strip_suffix(&[0]).unwrap_or(name);
        if name == NOTE_NAME && ntype == NOTE_TYPE {
            return Ok(Some(&data[desc_start..desc_end]));
        }
        data = &data[pad(desc_end).min(data.len())..];
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::find_note;

    #[test]
    fn note_framing() {
        let mut n = Vec::new();
        n.extend_from_slice(&4u32.to_le_bytes());
        n.extend_from_slice(&4u32.to_le_bytes());
        n.extend_from_slice(&7u32.to_le_bytes());
        n.extend_from_slice(b"GNU\0abcd");
        n.extend_from_slice(&6u32.to_le_bytes());
        n.extend_from_slice(&8u32.to_le_bytes());
        n.extend_from_slice(&1u32.to_le_bytes());
        n.extend_from_slice(b"OCaml\0\0\0");
        n.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            find_note(&n, true, 4),
            Ok(Some(&[1, 2, 3, 4, 5, 6, 7, 8][..]))
        );
        assert!(find_note(&n[..n.len() - 1], true, 4).is_err());
        assert!(find_note(&n[..5], true, 4).is_err());
        assert_eq!(find_note(&n[..20], true, 4), Ok(None));
    }
}
