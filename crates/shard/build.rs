//! `SHARD_PERTURB=…` → `--cfg shard_perturb="…"`: the must-fail builds of scripts/must-fail.sh
//! (crates/perturb). The perturbations, what each breaks and the tests that must catch it:
//! must-fail.txt beside this file.
fn main() {
    let names = cobordism_perturb::names(include_str!("must-fail.txt"));
    cobordism_perturb::cfg_from_env("SHARD_PERTURB", "shard_perturb", &names);
}
