//! End-to-end tests of the `cobordism` binary (one test binary, several modules).

mod common;
mod gguf_errors;
mod pipeline;
mod properties;
mod remote;
mod requantize;
mod writes;
