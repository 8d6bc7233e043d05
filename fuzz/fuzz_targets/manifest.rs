//! The manifest parser on arbitrary bytes: a manifest that parses survives a JSON round trip.
#![no_main]

use cobordism_protocol::Manifest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = Manifest::parse(data) {
        let again = Manifest::parse(m.to_json().as_bytes()).expect("a valid manifest re-parses");
        assert_eq!(again, m);
        let _ = m.row_bytes();
    }
});
