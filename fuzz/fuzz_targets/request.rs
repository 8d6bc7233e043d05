//! What the shard decodes from a request: the body (for any hidden size), the query (reply form),
//! the `Authorization` header; and the client's decoding of section answers.
#![no_main]

use cobordism_protocol::{bearer_matches, decode_hidden, parse_top_k, Form, TopK};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&h, body)) = data.split_first() else {
        return;
    };
    let hidden = usize::from(h) * 3;
    if let Ok((x, n)) = decode_hidden(body, hidden) {
        assert_eq!(x.len(), n * hidden);
        assert!(x.iter().all(|v| v.is_finite()));
    }
    let text = String::from_utf8_lossy(body);
    if let Ok(k) = parse_top_k(&text) {
        assert!((1..=1024).contains(&k));
    }
    let pairs = text.split('&').filter_map(|p| p.split_once('='));
    if let Ok(form) = Form::parse(pairs) {
        let query = form.query();
        let again = Form::parse(query.split('&').filter_map(|p| p.split_once('=')));
        assert_eq!(again.as_ref(), Ok(&form), "{query}");
    }
    assert!(!bearer_matches(Some(&text), "a-token-never-generated-by-the-fuzzer\u{1}"));
    if let Ok(sections) = TopK::decode_all(body) {
        let mut again = Vec::new();
        for s in &sections {
            s.encode_into(&mut again);
        }
        assert_eq!(again, body);
    }
});
