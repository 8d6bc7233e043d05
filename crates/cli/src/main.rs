//! The `cobordism` binary: argument parsing and exit codes; the commands live in the library.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use cobordism::{
    demo, deploy, logits, plan, sample, shard_settings, slice, status, synth, upload, warm,
    ExitError,
};

/// Run an LLM's lm-head sharded across Cloudflare Workers: make or take a GGUF model, cut its
/// lm-head into per-Worker slices, upload them to R2 and query the shards.
#[derive(Parser, Debug)]
#[command(
    name = "cobordism",
    version,
    propagate_version = true,
    after_long_help = "\
The whole system on this machine, no account needed:
  cobordism demo [--shape qwen2.5-7b|gemma3-27b|tiny] [--type q6_k|q4_k] [--shards 8]

A typical run:
  cobordism synth  --out tiny.gguf --shape tiny --type q6_k
  cobordism plan   --gguf tiny.gguf --shards 2
  cobordism slice  --gguf tiny.gguf --shards 2 --out slices/tiny
  cobordism upload --dir slices/tiny --bucket cobordism-lm-head --prefix model --local
  cobordism logits --manifest slices/tiny/manifest.json --local --hidden-seed 1
  cobordism sample --manifest slices/tiny/manifest.json --local --hidden-seed 1 --seed 42

Exit codes: 0 success, 1 error, 2 bad arguments, 3 a slice does not fit the budget,
4 --verify found a difference, 5 status found an unhealthy shard."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Write a GGUF file with a seeded random Q4_K/Q6_K lm-head of a given shape.
    Synth(synth::Args),
    /// Show how the lm-head of a GGUF file splits into shard slices and whether they fit.
    Plan(plan::Args),
    /// Cut the lm-head into per-shard slice files and a manifest.json.
    Slice(slice::Args),
    /// Check the slices, then put them and the manifest into R2 with wrangler.
    Upload(upload::Args),
    /// Deploy the shard Workers to Cloudflare, change their settings, rotate their token, or
    /// delete them: the deployment is recorded in .cobordism/deployment.toml.
    Deploy(deploy::Args),
    /// Check a shard's variables as the shard reads them (prints its settings).
    Settings(shard_settings::Args),
    /// Ask every shard to load its slice now (before a session's first token).
    Warm(warm::Args),
    /// One table of every shard's state from its /healthz; non-zero exit naming unhealthy shards.
    Status(status::Args),
    /// Compute the logits of a hidden vector from the shards or locally.
    Logits(logits::Args),
    /// Draw a token exactly (temperature, top-k, top-p, min-p) from the shards or locally.
    Sample(sample::SampleArgs),
    /// Log-probabilities of given tokens from the shards or locally.
    Logprobs(sample::LogprobsArgs),
    /// Run everything locally: synthesize, slice, upload and query eight shards in workerd.
    Demo(demo::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Synth(a) => synth::run(a),
        Command::Plan(a) => plan::run(a),
        Command::Slice(a) => slice::run(a),
        Command::Upload(a) => upload::run(a),
        Command::Deploy(a) => deploy::run(a),
        Command::Settings(a) => shard_settings::run(a),
        Command::Warm(a) => warm::run(a),
        Command::Status(a) => status::run(a),
        Command::Logits(a) => logits::run(a),
        Command::Sample(a) => sample::run_sample(a),
        Command::Logprobs(a) => sample::run_logprobs(a),
        Command::Demo(a) => demo::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(e.downcast_ref::<ExitError>().map_or(1, |x| x.code))
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::Cli;

    /// The `cobordism …` lines of a help text, backslash continuations joined.
    fn examples(help: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut open: Option<String> = None;
        for line in help.lines().map(str::trim) {
            let text = match open.take() {
                Some(start) => format!("{start} {line}"),
                None if line.starts_with("cobordism ") => line.to_string(),
                None => continue,
            };
            match text.strip_suffix('\\') {
                Some(start) => open = Some(start.trim_end().to_string()),
                None => out.push(text),
            }
        }
        out
    }

    #[test]
    fn every_example_in_the_help_parses() {
        let mut cli = Cli::command();
        cli.build();
        let mut helps = vec![cli.render_long_help().to_string()];
        for sub in cli.get_subcommands_mut() {
            helps.push(sub.render_long_help().to_string());
        }
        let mut parsed = 0;
        for example in helps.iter().flat_map(|h| examples(h)) {
            let line = example.split(" #").next().unwrap_or_default();
            if line.contains('[') {
                continue; // a synopsis (`cobordism demo [--shape …]`), not a command line
            }
            if let Err(e) = Cli::try_parse_from(line.split_whitespace()) {
                panic!("the help's example does not parse: {line}\n{e}");
            }
            parsed += 1;
        }
        assert!(parsed >= 20, "only {parsed} examples found");
    }
}
