//! `ptscope mem`: the memtrace tools (owned by the memtrace work; stub for now).

/// Arguments of `ptscope mem`.
#[derive(clap::Args, Debug)]
pub struct MemArgs {
    /// The tool to run.
    pub tool: String,
}

/// Runs a memtrace tool.
pub fn run(args: MemArgs) -> anyhow::Result<()> {
    anyhow::bail!("ptscope mem {}: not implemented yet", args.tool)
}
