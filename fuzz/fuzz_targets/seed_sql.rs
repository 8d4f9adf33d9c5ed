//! The `[seed]` SQL template parser on the fuzzer's text: the text is the `account` insert
//! of an otherwise valid scenario; a template that compiles is rendered for 1 and 3 rows.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(template) = std::str::from_utf8(data) else {
        return;
    };
    // A TOML literal string cannot hold `'` or a newline: a multi-line basic string with
    // `\` and `"` escaped holds anything.
    let escaped = template.replace('\\', "\\\\").replace('"', "\\\"");
    let src = format!(
        "[target]\nurl = \"http://127.0.0.1:9/\"\n[[op]]\nname = \"a\"\npath = \"/\"\n\
         [[step]]\nplayers = 1\nduration = \"1s\"\n[seed]\naccounts = 3\n\
         account = \"\"\"{escaped}\"\"\"\n"
    );
    if let Ok(s) = herd_driver::Scenario::parse("fuzz.toml", &src, &[])
        && let Some(seed) = &s.seed
    {
        for insert in &seed.inserts {
            let _ = insert.sql(1);
            let _ = insert.sql(3);
            let _ = insert.params().count();
        }
    }
});
