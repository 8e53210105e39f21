//! C `printf` float conversions as OCaml's `Printf` (glibc) renders them, so tool
//! output matches the reference byte for byte.

/// `%W.Pf`: right-aligned to `width`; infinities as `inf`, NaN as `-nan` (the sign
/// x86-64 gives the NaNs these tools produce, from 0/0, and glibc prints).
pub(crate) fn f(x: f64, width: usize, prec: usize) -> String {
    let s = if x.is_nan() {
        "-nan".to_string()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.to_string()
    } else {
        format!("{x:.prec$}")
    };
    format!("{s:>width$}")
}

/// `%.Pe`: like Rust's `{:e}` but with a signed exponent of at least two digits.
pub(crate) fn e(x: f64, prec: usize) -> String {
    if !x.is_finite() {
        return f(x, 0, 0);
    }
    let s = format!("{x:.prec$e}");
    match s.split_once('e') {
        Some((mant, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            format!("{mant}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_c_conventions() {
        assert_eq!(e(2e-5, 1), "2.0e-05");
        assert_eq!(e(0.01, 1), "1.0e-02");
        assert_eq!(e(12345.0, 1), "1.2e+04");
        assert_eq!(f(f64::INFINITY, 3, 0), "inf");
        assert_eq!(f(f64::NAN, 3, 0), "-nan");
        assert_eq!(f(7.5, 3, 1), "7.5");
        assert_eq!(f(23.4, 3, 0), " 23");
        assert_eq!(f(0.8517, 0, 3), "0.852");
    }
}
