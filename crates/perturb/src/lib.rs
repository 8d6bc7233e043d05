//! The must-fail builds' switch, for build scripts.
//!
//! A must-fail build (`scripts/must-fail.sh`, docs/TESTING.md) compiles one crate with one
//! plausible bug put in on purpose, then requires named tests to fail. The bug is chosen by an
//! environment variable (`KQUANT_PERTURB=order`), which the crate's build script hands to
//! [`cfg_from_env`]; it becomes `--cfg kquant_perturb="order"` for that crate alone.
//!
//! Why not `RUSTFLAGS="--cfg …"`: `RUSTFLAGS` applies to every crate of the build, so each
//! perturbation recompiled every dependency, and it silently replaced `.cargo/config.toml`'s
//! per-target flags. A build script's `cargo:rustc-cfg` reaches its own crate only, and
//! `rerun-if-env-changed` makes cargo rebuild that crate (and what depends on it) when the
//! variable changes, nothing else.
//!
//! Why not a cargo feature: features unify across a build graph, so any crate could switch a
//! bug on for everyone; an environment variable is set by whoever runs the build.
//!
//! An unknown value fails the build, naming the known ones: a typo must not build the correct
//! code and let the must-fail check pass for the wrong reason.

use std::env::{self, VarError};

/// The perturbations' names from a crate's `must-fail.txt` (the one list: `scripts/must-fail.sh`
/// reads the same file for the tests each must make fail): the first word of each line that is
/// neither blank nor a `#` comment.
pub fn names(list: &str) -> Vec<&str> {
    list.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(|line| line.split_whitespace().next())
        .collect()
}

/// Declares `cfg(NAME, values(…))` to rustc's `unexpected_cfgs` check, and sets `--cfg NAME="V"`
/// when the environment variable `var` holds one of `values` (unset or empty: no perturbation).
/// Exits the build script with a message on any other value.
pub fn cfg_from_env(var: &str, name: &str, values: &[&str]) {
    println!("cargo::rerun-if-env-changed={var}");
    let quoted: Vec<String> = values.iter().map(|v| format!("\"{v}\"")).collect();
    println!(
        "cargo::rustc-check-cfg=cfg({name}, values({}))",
        quoted.join(", ")
    );
    match env::var(var) {
        Ok(value) if value.is_empty() => {}
        Ok(value) if values.contains(&value.as_str()) => {
            println!("cargo::rustc-cfg={name}=\"{value}\"");
            println!(
                "cargo::warning={var}={value}: a must-fail build, with a bug put in on purpose"
            );
        }
        Ok(value) => fail(
            var,
            &format!("`{value}` is not a known perturbation"),
            values,
        ),
        Err(VarError::NotUnicode(_)) => fail(var, "is not valid UTF-8", values),
        Err(VarError::NotPresent) => {}
    }
}

fn fail(var: &str, what: &str, values: &[&str]) -> ! {
    eprintln!("{var}: {what}; expected one of: {}", values.join(", "));
    std::process::exit(1);
}

#[cfg(test)]
mod tests {
    use super::names;

    #[test]
    fn names_are_the_first_words_of_the_lines_that_are_not_comments() {
        let list = "# NAME TARGETS TEST\n\norder x86 a:b c:d\n  # indented comment\nsigned_i7\n";
        assert_eq!(names(list), ["order", "signed_i7"]);
    }
}
