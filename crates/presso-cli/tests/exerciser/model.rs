//! The in-memory model of the files: their bytes, and whether each is unchanged since its last
//! fsync (so that a `kill -9` of the daemon must have kept it byte for byte).

/// One file as the model knows it.
#[derive(Clone, Debug, Default)]
pub struct FileModel {
    /// Every byte; the length is the size.
    pub bytes: Vec<u8>,
    /// Unchanged since its last fsync/fdatasync (or the last clean unmount, or recovery from a
    /// kill): what a `kill -9` of the daemon must keep. Any successful call that may change the
    /// file clears it, even when the bytes stay the same (a write, a truncate to any size, an
    /// `O_TRUNC` open, fallocate of a supported mode, a mapped write, a copy into the file);
    /// failed calls (unsupported fallocate modes, overlapping copies), reads and copies out of
    /// the file do not.
    pub synced: bool,
}

impl FileModel {
    /// A write of `data` at `offset`, extending the file if it ends past its end.
    pub fn write_at(&mut self, offset: u64, data: &[u8]) {
        let end = offset as usize + data.len();
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        self.bytes[offset as usize..end].copy_from_slice(data);
        self.synced = false;
    }

    /// A truncate to `size`, down (dropping bytes) or up (zeros).
    pub fn truncate(&mut self, size: u64) {
        self.bytes.resize(size as usize, 0);
        self.synced = false;
    }

    /// Zeros in `offset..offset + len`, within the size only.
    pub fn zero(&mut self, offset: u64, len: u64) {
        let end = (offset + len).min(self.len());
        if offset < end {
            self.bytes[offset as usize..end as usize].fill(0);
        }
        self.synced = false;
    }

    /// The size.
    pub fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// The bytes a read of `offset..offset + len` returns (fewer at the end of the file).
    pub fn slice(&self, offset: u64, len: u64) -> &[u8] {
        let end = offset.saturating_add(len).min(self.len());
        if offset < end {
            &self.bytes[offset as usize..end as usize]
        } else {
            &[]
        }
    }
}

/// The files of one run, by number.
#[derive(Clone, Debug)]
pub struct Model {
    /// File `i` is `files[i]`.
    pub files: Vec<FileModel>,
}

impl Model {
    /// `count` empty files, synced (created and fsync'd at the start).
    pub fn new(count: u8) -> Model {
        Model {
            files: (0..count)
                .map(|_| FileModel {
                    bytes: Vec::new(),
                    synced: true,
                })
                .collect(),
        }
    }
}

/// `Err` saying where `got` and `want` first differ (and their lengths) unless they are equal.
pub fn compare(what: &str, offset: u64, got: &[u8], want: &[u8]) -> Result<(), String> {
    if got == want {
        return Ok(());
    }
    let first = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    let window = |bytes: &[u8]| -> Vec<u8> { bytes.iter().skip(first).take(16).copied().collect() };
    let last = got
        .iter()
        .zip(want)
        .rposition(|(a, b)| a != b)
        .map_or(String::new(), |l| {
            format!(", last difference at {}", offset + l as u64)
        });
    Err(format!(
        "{what}: got {} bytes, expected {}; first difference at offset {}{last} (got {:02x?}, \
         expected {:02x?})",
        got.len(),
        want.len(),
        offset + first as u64,
        window(got),
        window(want),
    ))
}
