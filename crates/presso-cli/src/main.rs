//! `presso`: the command-line tool of the Presso transparent-compression file system.
//!
//! Each subcommand lives in its own module under [`cmd`]; `main` only parses the command line,
//! dispatches, and turns an error into a message on stderr and a non-zero exit status.

mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Presso: a FUSE file system that compresses transparently, offloading to the fastest engine
/// present (ISA-L today).
#[derive(Debug, Parser)]
#[command(
    name = "presso",
    version,
    propagate_version = true,
    after_help = "Quick start:
  presso create /srv/pool -o compression=gzip-6
  presso mount /srv/pool /mnt/data
  cp -r ~/genomes /mnt/data/
  presso status /mnt/data
  presso unmount /mnt/data"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Create(cmd::create::CreateArgs),
    Mount(cmd::mount::MountArgs),
    #[command(alias = "umount")]
    Unmount(cmd::unmount::UnmountArgs),
    Status(cmd::status::StatusArgs),
    Get(cmd::props::GetArgs),
    Set(cmd::props::SetArgs),
    Gc(cmd::gc::GcArgs),
    Scrub(cmd::scrub::ScrubArgs),
    Recover(cmd::recover::RecoverArgs),
    Bench(cmd::bench::BenchArgs),
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    let invoked_as = argv
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("presso");
    let result = if invoked_as.starts_with("mount.") {
        // mount(8) runs /sbin/mount.fuse.presso POOL DIR -o OPTIONS.
        cmd::mount::run_helper(&argv[1..])
    } else {
        match Cli::parse().command {
            Command::Create(args) => cmd::create::run(args),
            Command::Mount(args) => cmd::mount::run(args),
            Command::Unmount(args) => cmd::unmount::run(args),
            Command::Status(args) => cmd::status::run(args),
            Command::Get(args) => cmd::props::get(args),
            Command::Set(args) => cmd::props::set(args),
            Command::Gc(args) => cmd::gc::run(args),
            Command::Scrub(args) => cmd::scrub::run(args),
            Command::Recover(args) => cmd::recover::run(args),
            Command::Bench(args) => cmd::bench::run(args),
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // `{:#}` prints the whole context chain on one line: "cannot read x: No such file".
            presso_fs::log!("presso: error: {err:#}");
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
