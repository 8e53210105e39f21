//! `symdump ELF [QUERY…]`: counts symbols and line rows, then resolves each query: a
//! `FILE:LINE[:COL]`, a `0xADDR` (containing function and source position) or a name.

use std::time::Instant;

use ptscope_symbols::MappedFile;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: symdump ELF [QUERY…]")?;
    let file = MappedFile::open(&path)?;
    let elf = file.elf()?;
    let t = Instant::now();
    let syms = elf.symbols()?;
    eprintln!("{} functions in {:?}", syms.functions().len(), t.elapsed());
    let t = Instant::now();
    let lines = elf.line_table();
    eprintln!("line table in {:?}", t.elapsed());
    for q in args {
        if let Some(hex) = q.strip_prefix("0x") {
            let a = u64::from_str_radix(hex, 16)?;
            let f = syms.containing(a).map(|s| s.demangled().to_owned());
            let p = lines.as_ref().ok().and_then(|l| l.position(a));
            println!("{q}: {f:?} {p:?}");
        } else if let Some((file, rest)) = q.split_once(':') {
            let mut it = rest.split(':');
            let line: u64 = it.next().unwrap_or("").parse()?;
            let col = it.next().map(str::parse).transpose()?;
            match &lines {
                Ok(l) => match l.addresses_for_line(file, line, col) {
                    Ok(v) => v.iter().for_each(|a| {
                        println!("{q}: {:#x} ({}:{}:{})", a.address, a.file, a.line, a.col)
                    }),
                    Err(e) => println!("{e}"),
                },
                Err(e) => println!("{e}"),
            }
        } else {
            match syms.lookup(&q) {
                Ok(s) => println!(
                    "{q}: {:#x} size {} {} ({})",
                    s.address(),
                    s.size(),
                    s.demangled(),
                    s.name()
                ),
                Err(e) => println!("{e}"),
            }
        }
    }
    Ok(())
}
