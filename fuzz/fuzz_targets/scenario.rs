//! The scenario parser (TOML, `--set` overrides, every check of `Scenario::parse`) on the
//! fuzzer's text: any input gets `Ok` or a diagnostic, never a panic or a hang. The first
//! line, when it holds `=`, is also applied as a `--set KEY=VALUE`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = herd_driver::Scenario::parse("fuzz.toml", text, &[]);
    if let Some((first, rest)) = text.split_once('\n')
        && first.contains('=')
    {
        let _ = herd_driver::Scenario::parse("fuzz.toml", rest, &[first.to_owned()]);
    }
});
