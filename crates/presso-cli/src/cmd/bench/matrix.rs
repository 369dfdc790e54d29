//! The matrix of rows to measure: every codec on every backend that can run it, each row with a
//! fresh engine configured for its backend, and the loop that measures them in order.

use anyhow::Result;
use presso_codec::accel::SizeWindow;
use presso_codec::frame::MAX_RECORD_SIZE;
use presso_codec::{CodecId, CodecSpec, DeflateEngine, Engine, EngineConfig, Offload, Threshold};

use super::corpus::Corpus;
use super::measure::measure;
use super::report::progress_bar;
use super::Row;

/// Where a row's records are compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Backend {
    /// The engine's CPU workers (every codec but gzip).
    Cpu,
    /// gzip on the CPU with zlib.
    Zlib,
    /// gzip on the CPU with libdeflate.
    Libdeflate,
    /// gzip offloaded to the ISA-L accelerator.
    Isal,
}

impl Backend {
    /// The name shown in the `backend` column.
    pub(super) fn name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Zlib => "zlib",
            Backend::Libdeflate => "libdeflate",
            Backend::Isal => "isal",
        }
    }

    /// The backends measured for a codec.
    pub(super) fn for_codec(codec: CodecId) -> &'static [Backend] {
        match codec {
            CodecId::Gzip => &[Backend::Zlib, Backend::Libdeflate, Backend::Isal],
            _ => &[Backend::Cpu],
        }
    }

    /// Deflate engine used to compress (CPU path) and to decode.
    pub(super) fn deflate(self) -> DeflateEngine {
        match self {
            Backend::Zlib => DeflateEngine::Zlib,
            Backend::Isal => DeflateEngine::Isal,
            Backend::Cpu | Backend::Libdeflate => DeflateEngine::Libdeflate,
        }
    }
}

/// The engine settings shared by every row.
pub(super) struct Settings {
    /// Compression workers, ISA-L threads and decode threads.
    pub(super) workers: usize,
    /// Minimum saving for a record to be stored compressed.
    pub(super) threshold: Threshold,
    /// Whether the cheap compressibility pre-check runs.
    pub(super) precheck: bool,
}

/// Starts the engine of one row; `Err` says why the ISA-L accelerator did not start.
fn start_engine(backend: Backend, settings: &Settings) -> Result<Engine, String> {
    let config = EngineConfig {
        workers: settings.workers,
        queue_depth: settings.workers * 8,
        threshold: settings.threshold,
        precheck: settings.precheck,
        deflate: backend.deflate(),
        decode_deflate: backend.deflate(),
        offload: Offload::Off,
        ..EngineConfig::default()
    };
    if backend != Backend::Isal {
        return Ok(Engine::with_accelerator(config, None));
    }
    // The production accelerator, but offloading every record size, so the row measures the
    // accelerator whatever --recordsize is. CPU fallbacks use libdeflate, as in production. On
    // threads of its own: this benchmark submits from one thread.
    let placement = presso_codec::engine::AccelPlacement {
        workers: settings.workers,
        on_submitter: false,
    };
    let accel = presso_codec::engine::default_accelerator(
        placement,
        SizeWindow {
            min: 1,
            max: MAX_RECORD_SIZE,
        },
    )?;
    let config = EngineConfig {
        offload: Offload::On,
        deflate: DeflateEngine::Libdeflate,
        ..config
    };
    Ok(Engine::with_accelerator(config, Some(accel)))
}

/// Measures every spec on each of its backends, in order. When the ISA-L accelerator does not
/// start, warns once and leaves out the isal rows.
pub(super) fn measure_all(
    corpus: &Corpus,
    specs: &[CodecSpec],
    settings: &Settings,
) -> Result<Vec<Row>> {
    let matrix: Vec<(CodecSpec, Backend)> = specs
        .iter()
        .flat_map(|&spec| {
            Backend::for_codec(spec.codec)
                .iter()
                .map(move |&backend| (spec, backend))
        })
        .collect();
    let per_row = 2 * corpus.records.len() as u64;
    let progress = progress_bar(per_row * matrix.len() as u64);

    let mut rows = Vec::new();
    let mut isal_failed = false;
    for (spec, backend) in matrix {
        if backend == Backend::Isal && isal_failed {
            progress.inc(per_row);
            continue;
        }
        let engine = match start_engine(backend, settings) {
            Ok(engine) => engine,
            Err(why) => {
                isal_failed = true;
                progress.suspend(|| {
                    eprintln!(
                        "presso: warning: the ISA-L accelerator did not start ({why}); \
                         skipping the isal rows"
                    )
                });
                progress.inc(per_row);
                continue;
            }
        };
        rows.push(measure(corpus, spec, backend, engine, settings, &progress)?);
    }
    progress.finish_and_clear();
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use presso_codec::CODECS;

    #[test]
    fn gzip_runs_on_three_backends_and_the_rest_on_the_cpu() {
        assert_eq!(
            Backend::for_codec(CodecId::Gzip),
            &[Backend::Zlib, Backend::Libdeflate, Backend::Isal]
        );
        for info in CODECS.iter().filter(|c| c.id != CodecId::Gzip) {
            assert_eq!(Backend::for_codec(info.id), &[Backend::Cpu]);
        }
    }
}
