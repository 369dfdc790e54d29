//! The corpus: every file given, read into memory and cut into records of the record size.

use std::path::PathBuf;

use anyhow::{ensure, Context, Result};
use bytes::Bytes;
use presso_codec::Record;

/// Where a record came from, for error messages.
struct Origin {
    /// Index of the file in [`Corpus::files`].
    file: usize,
    /// Byte offset of the record in its file.
    offset: u64,
}

/// Every record of every file, in order.
pub(super) struct Corpus {
    /// The files, in the order given.
    pub(super) files: Vec<PathBuf>,
    /// Every record of every file, in order.
    pub(super) records: Vec<Record>,
    /// Where each record of `records` came from.
    origins: Vec<Origin>,
    /// Bytes of all files.
    pub(super) logical_bytes: u64,
}

impl Corpus {
    /// Reads every file and cuts it into records of `record_size` bytes (the last one of a file
    /// may be shorter); fails when a file cannot be read or every file is empty.
    pub(super) fn load(paths: &[PathBuf], record_size: usize) -> Result<Corpus> {
        let mut corpus = Corpus {
            files: paths.to_vec(),
            records: Vec::new(),
            origins: Vec::new(),
            logical_bytes: 0,
        };
        for (file, path) in paths.iter().enumerate() {
            let data = Bytes::from(
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?,
            );
            let mut start = 0;
            while start < data.len() {
                let end = (start + record_size).min(data.len());
                corpus
                    .records
                    .push(Record::from_segments([data.slice(start..end)]));
                corpus.origins.push(Origin {
                    file,
                    offset: start as u64,
                });
                start = end;
            }
            corpus.logical_bytes += data.len() as u64;
        }
        ensure!(
            corpus.logical_bytes > 0,
            "nothing to measure: every file given is empty"
        );
        Ok(corpus)
    }

    /// Names record `index` by file and offset, for error messages.
    pub(super) fn describe(&self, index: usize) -> String {
        let origin = &self.origins[index];
        format!(
            "record {index} ({} at offset {})",
            self.files[origin.file].display(),
            origin.offset
        )
    }
}
