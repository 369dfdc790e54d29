//! One module per subcommand. Each exposes an `Args` struct (clap derive) and a `run` function
//! returning `anyhow::Result<()>`; `main` wires them into the `Command` enum. `target` and
//! `request` are shared by the commands that act on a pool.

mod background;
pub mod bench;
pub mod create;
pub mod gc;
pub mod mount;
pub mod props;
pub mod recover;
pub mod request;
pub mod scrub;
pub mod status;
pub mod target;
pub mod unmount;
