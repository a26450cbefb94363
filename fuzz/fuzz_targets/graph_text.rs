//! The graph IR's text parser: an error, or a graph whose printed form
//! parses back and prints the same (text, not graphs, is compared: a NaN
//! constant is not equal to itself).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(g) = kiln_ir::text::parse(text) {
        let printed = kiln_ir::text::print(&g);
        let again = kiln_ir::text::parse(&printed).expect("a printed graph parses");
        assert_eq!(kiln_ir::text::print(&again), printed, "print/parse round trip");
    }
});
