//! The adjustments' wire layout (`cobordism_protocol::adjust`): any bytes decode or are refused,
//! never a panic; what decodes encodes back to the very bytes; and applied to a vector cut
//! anywhere in two, it panics for no cut.
#![no_main]

use cobordism_protocol::adjust::{decode, encode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [n, v, section @ ..] = data else {
        return;
    };
    let n = 1 + usize::from(*n) % 8;
    let vocab = 1 + u32::from(*v) * 97;
    let Ok(adjusts) = decode(section, n, vocab) else {
        return;
    };
    assert_eq!(encode(&adjusts), section);
    let cut = (section.len() as u32).wrapping_mul(31) % vocab;
    for a in &adjusts {
        let mut logits = vec![0.5f32; vocab as usize];
        let (low, high) = logits.split_at_mut(cut as usize);
        a.apply(low, 0);
        a.apply(high, cut);
    }
});
