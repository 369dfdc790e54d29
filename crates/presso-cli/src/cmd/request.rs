//! Running a control request on a pool: through the daemon's socket when it is mounted, or on
//! the pool opened here when it is not. Long requests show a progress bar on a terminal.

use std::io::IsTerminal;

use anyhow::{anyhow, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use presso_fs::control::{self, Request};
use presso_fs::maintenance::Progress;
use presso_fs::pool::{Pool, PoolOptions};
use serde_json::Value;

use super::target::Target;

/// A progress bar in bytes named `label`, drawn on stderr when it is a terminal.
pub fn progress_bar(label: &str) -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_draw_target(if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    });
    bar.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_message(label.to_string());
    bar
}

/// Runs `request` on `target`'s pool; `label` names the progress bar (`None`: no bar).
pub fn run(target: &Target, request: Request, label: Option<&str>) -> Result<Value> {
    let bar = label.map(progress_bar);
    let mut on_progress = |p: Progress| {
        if let Some(bar) = &bar {
            bar.set_length(p.total);
            bar.set_position(p.done);
        }
    };
    let result = match control::call(&target.pool, &request, &mut on_progress) {
        Ok(Some(v)) => Ok(v),
        Err(e) => Err(anyhow!(e)),
        Ok(None) => {
            if let Some(m) = &target.mount {
                return Err(anyhow!(
                    "the daemon serving {} does not answer on its control socket",
                    m.mountpoint.display()
                ));
            }
            let (pool, _) = Pool::open(&target.pool, PoolOptions::default())
                .with_context(|| format!("cannot open pool {}", target.pool.display()))?;
            let r = control::run_offline(&pool, request, &mut on_progress);
            let closed = pool.close();
            let v = r.map_err(anyhow::Error::from)?;
            closed?;
            Ok(v)
        }
    };
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    result
}
