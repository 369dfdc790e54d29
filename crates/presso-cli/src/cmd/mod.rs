//! One module per subcommand. Each exposes an `Args` struct (clap derive) and a `run` function
//! returning `anyhow::Result<()>`; `main` wires them into the `Command` enum.

pub mod bench;
