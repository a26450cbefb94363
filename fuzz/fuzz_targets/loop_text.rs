//! The loop IR's text parser: an error, or a kernel whose printed form
//! parses back and prints the same.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(k) = kiln_loop::parse_kernel(text) {
        let printed = k.to_string();
        let again = kiln_loop::parse_kernel(&printed).expect("a printed kernel parses");
        assert_eq!(again.to_string(), printed, "print/parse round trip");
    }
});
