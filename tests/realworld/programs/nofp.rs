// Built with `rustc -C opt-level=3 -C force-frame-pointers=no`: only DWARF unwinding can
// walk these stacks.
use std::hint::black_box;

#[inline(never)]
fn checksum(data: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in data {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h
}

#[inline(never)]
fn fill(buf: &mut [u8], seed: u64) {
    let mut x = seed | 1;
    for b in buf.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
}

#[inline(never)]
fn crunch(rounds: u64) -> u64 {
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    for r in 0..rounds {
        fill(black_box(&mut buf), r);
        total = total.wrapping_add(checksum(black_box(&buf)));
    }
    total
}

fn main() {
    let rounds = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100);
    println!("{}", crunch(rounds));
}
