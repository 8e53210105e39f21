//! perf's `--control=fifo:CTL,ACK` protocol: ptscope writes `snapshot\n`, `stop\n` or
//! `ping\n` to CTL; perf answers `ack\n` (perf 6.x adds a NUL) on ACK once done.

use crate::{Error, Result};
use std::ffi::CString;
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A command perf understands on its control fifo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Take an AUX (PT) snapshot.
    Snapshot,
    /// Stop recording and exit (writing the data, and the at-exit snapshot).
    Stop,
    /// Just answer: perf is up and its event loop runs.
    Ping,
}

impl Command {
    /// The line written to the fifo.
    pub fn line(self) -> &'static str {
        match self {
            Command::Snapshot => "snapshot\n",
            Command::Stop => "stop\n",
            Command::Ping => "ping\n",
        }
    }

    /// Parses a line read from the fifo (for stand-ins of perf).
    pub fn parse(line: &str) -> Option<Self> {
        match line.trim_matches(|c: char| c.is_whitespace() || c == '\0') {
            "snapshot" => Some(Command::Snapshot),
            "stop" => Some(Command::Stop),
            "ping" => Some(Command::Ping),
            _ => None,
        }
    }
}

/// The two fifos, open on our side; removed when dropped.
pub struct ControlFifos {
    ctl_path: PathBuf,
    ack_path: PathBuf,
    ctl: File,
    ack: File,
    pending: Vec<u8>,
}

fn mkfifo(path: &Path) -> Result<()> {
    let _ = std::fs::remove_file(path);
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|source| Error::PathHasNul {
        path: path.to_owned(),
        source,
    })?;
    // SAFETY: `c` is a valid NUL-terminated path.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(Error::CreateFifo {
            path: path.to_owned(),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Opens a fifo read-write: on Linux that never blocks waiting for the other side, and
/// keeps the fifo alive whichever side closes first.
fn open_rw(path: &Path) -> Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| Error::OpenFifo {
            path: path.to_owned(),
            source,
        })
}

impl ControlFifos {
    /// Creates `DIR/ctl.fifo` and `DIR/ack.fifo`.
    pub fn create(dir: &Path) -> Result<Self> {
        let ctl_path = dir.join("ctl.fifo");
        let ack_path = dir.join("ack.fifo");
        mkfifo(&ctl_path)?;
        if let Err(e) = mkfifo(&ack_path) {
            let _ = std::fs::remove_file(&ctl_path);
            return Err(e);
        }
        let opened = open_rw(&ctl_path).and_then(|c| Ok((c, open_rw(&ack_path)?)));
        match opened {
            Ok((ctl, ack)) => Ok(ControlFifos {
                ctl_path,
                ack_path,
                ctl,
                ack,
                pending: Vec::new(),
            }),
            Err(e) => {
                let _ = std::fs::remove_file(&ctl_path);
                let _ = std::fs::remove_file(&ack_path);
                Err(e)
            }
        }
    }

    /// The command fifo's path.
    pub fn ctl_path(&self) -> &Path {
        &self.ctl_path
    }

    /// The acknowledgement fifo's path.
    pub fn ack_path(&self) -> &Path {
        &self.ack_path
    }

    /// Sends `cmd` and waits up to `timeout` for perf's `ack`. `alive` is polled meanwhile so a
    /// perf that died does not cost the whole timeout; it returns false when perf is gone.
    pub fn send(
        &mut self,
        cmd: Command,
        timeout: Duration,
        mut alive: impl FnMut() -> bool,
    ) -> Result<()> {
        self.drain();
        self.pending.clear();
        self.ctl
            .write_all(cmd.line().as_bytes())
            .map_err(|source| Error::WriteFifo {
                path: self.ctl_path.clone(),
                source,
            })?;
        let start = Instant::now();
        loop {
            self.drain();
            if let Some(i) = find(&self.pending, b"ack\n") {
                let mut end = i + 4;
                if self.pending.get(end) == Some(&0) {
                    end += 1;
                }
                self.pending.drain(..end);
                return Ok(());
            }
            if !alive() {
                return Err(Error::PerfExitedBeforeAck {
                    command: cmd.line().trim_end(),
                });
            }
            if start.elapsed() >= timeout {
                return Err(Error::NoAck {
                    command: cmd.line().trim_end(),
                    waited: timeout,
                });
            }
            let mut pfd = libc::pollfd {
                fd: self.ack.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd; a short timeout keeps `alive` checks frequent.
            unsafe { libc::poll(&mut pfd, 1, 20) };
        }
    }

    fn drain(&mut self) {
        let mut buf = [0u8; 256];
        loop {
            match self.ack.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => self.pending.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
    }
}

impl Drop for ControlFifos {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.ctl_path);
        let _ = std::fs::remove_file(&self.ack_path);
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_and_timeouts() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_owned();
        let mut c = ControlFifos::create(&dir).unwrap();
        let (ctl, ack) = (c.ctl_path().to_owned(), c.ack_path().to_owned());
        let t = std::thread::spawn(move || {
            let mut r = std::fs::File::open(&ctl).unwrap();
            let mut w = std::fs::OpenOptions::new().write(true).open(&ack).unwrap();
            let mut got = String::new();
            let mut b = [0u8; 64];
            while !got.contains("stop") {
                let n = r.read(&mut b).unwrap();
                got.push_str(std::str::from_utf8(&b[..n]).unwrap());
                w.write_all(b"ack\n\0").unwrap();
            }
            got
        });
        c.send(Command::Ping, Duration::from_secs(5), || true)
            .unwrap();
        c.send(Command::Snapshot, Duration::from_secs(5), || true)
            .unwrap();
        c.send(Command::Stop, Duration::from_secs(5), || true)
            .unwrap();
        assert_eq!(t.join().unwrap(), "ping\nsnapshot\nstop\n");
        // Nobody answers now.
        let e = c
            .send(Command::Ping, Duration::from_millis(100), || true)
            .unwrap_err();
        assert!(e.to_string().contains("did not acknowledge `ping`"), "{e}");
        let e = c
            .send(Command::Stop, Duration::from_secs(5), || false)
            .unwrap_err();
        assert!(e.to_string().contains("perf exited"), "{e}");
        drop(c);
        assert!(
            std::fs::read_dir(&dir).unwrap().next().is_none(),
            "fifos removed"
        );
        std::fs::remove_dir(&dir).unwrap();
        assert_eq!(Command::parse("snapshot\n"), Some(Command::Snapshot));
        assert_eq!(Command::parse("nope"), None);
    }
}
