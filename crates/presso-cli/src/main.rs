//! `presso`: the command-line tool of the Presso transparent-compression file system.
//!
//! Each subcommand lives in its own module under [`cmd`]; `main` only parses the command line,
//! dispatches, and turns an error into a message on stderr and a non-zero exit status.

mod cmd;
mod units;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Presso: transparent compression for a FUSE file system, with accelerator offload.
#[derive(Debug, Parser)]
#[command(name = "presso", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Bench(cmd::bench::BenchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => cmd::bench::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // `{:#}` prints the whole context chain on one line: "cannot read x: No such file".
            eprintln!("presso: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
