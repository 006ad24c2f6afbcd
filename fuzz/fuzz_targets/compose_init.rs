//! `binky init` over arbitrary compose text: the reader, the mapping and
//! the writer never panic, and whatever is written passes `binky check`
//! (`generate_from_text` refuses a result `check` rejects, so an `Err`
//! that says "this is a bug" is a finding too).

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let env = |name: &str| (name == "SET").then(|| "value".to_owned());
    match binky::init::generate_from_text(Path::new("/nonexistent-fuzz"), text, &env) {
        Ok(made) => {
            let report = binky::config::check_str(&made.toml, Path::new("binky.toml"));
            assert_eq!(report.errors(), 0, "{}", made.toml);
        }
        Err(e) => assert!(!e.message.contains("this is a bug"), "{e}"),
    }
});
