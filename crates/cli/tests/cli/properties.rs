//! Property: `slice` cuts any small lm-head into files that concatenate to the tensor's bytes,
//! with the sizes and checksums the manifest lists (fixed seed, no regression files).

use cobordism::gguf::{GgufWriter, MetaValue};
use cobordism::{plan::Budget, slice, slices};
use cobordism_protocol::Checksum;
use kquant::{synth::SplitMix64, QuantType};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, RngSeed};

proptest! {
    #![proptest_config(Config {
        cases: 64,
        rng_seed: RngSeed::Fixed(0x736c_6963_6573),
        failure_persistence: None,
        ..Config::default()
    })]

    #[test]
    fn slices_concatenate_to_the_tensor(
        ty in select(QuantType::ALL.to_vec()),
        (vocab, shards) in (1usize..=40).prop_flat_map(|v| (Just(v), 1..=v.min(12))),
        blocks in 1usize..=3,
        seed in any::<u64>(),
    ) {
        let hidden = blocks * 256;
        let mut tensor = vec![0u8; vocab * ty.row_bytes(hidden).unwrap()];
        SplitMix64::new(seed).fill_bytes(&mut tensor);
        let dir = tempfile::tempdir().unwrap();
        let (gguf, out) = (dir.path().join("m.gguf"), dir.path().join("slices"));
        let mut w = GgufWriter::new();
        w.kv("general.architecture", MetaValue::Str("llama".into()));
        let dims = [hidden as u64, vocab as u64];
        w.tensor("output.weight", &dims, ty.ggml_type(), tensor.len() as u64);
        let mut file = Vec::new();
        w.write_all(&mut file, &[&tensor]).unwrap();
        std::fs::write(&gguf, file).unwrap();
        let budget = Budget { mib: 100 };
        slice::run(&slice::Args {
            gguf,
            shards,
            out: out.clone(),
            budget,
            force: false,
            requantize: None,
            layout: kquant::Layout::Ggml,
        })
        .unwrap();

        let m = slices::read_manifest(&out.join(slice::MANIFEST)).unwrap();
        prop_assert_eq!((m.vocab, m.hidden, m.shard_count), (vocab, hidden, shards));
        let mut joined = Vec::new();
        for s in &m.shards {
            let bytes = std::fs::read(slices::path(&out, s)).unwrap();
            prop_assert_eq!(bytes.len() as u64, s.bytes);
            prop_assert_eq!(Checksum::of(&bytes), s.checksum.clone());
            joined.extend(bytes);
        }
        prop_assert!(joined == tensor, "the slices do not concatenate to the tensor");
    }
}
