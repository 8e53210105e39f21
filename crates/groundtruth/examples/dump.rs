//! Dumps a standard scenario as perf script text (debugging aid).
fn main() {
    let name = std::env::args().nth(1).unwrap_or_else(|| "clean".into());
    let spec = ptscope_groundtruth::gen::standard_specs(
        std::env::args().nth(2).map_or(1, |s| s.parse().unwrap()),
    )
    .into_iter()
    .find(|s| s.name == name)
    .expect("scenario");
    print!("{}", ptscope_groundtruth::generate(&spec).perf_script());
}
