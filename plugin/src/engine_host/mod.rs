//! Engine hosting: the analysis engine in a wasmtime sandbox (default) or linked natively.
