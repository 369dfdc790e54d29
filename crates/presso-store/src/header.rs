//! The pool header file, `presso.pool`. Little-endian throughout.
//!
//! ```text
//! offset size field
//!  0      8   magic             b"PRESSOPL"
//!  8      2   format version    u16, POOL_VERSION (1); a newer version is refused ("upgrade Presso")
//! 10      2   reserved          0
//! 12     16   pool uuid         16 random bytes
//! 28      8   creation time     u64, seconds since the Unix epoch
//! 36      4   creation nanos    u32, < 1_000_000_000
//! 40      4   properties length u32 n, at most MAX_PROPERTIES_LEN
//! 44      n   properties        UTF-8, one "key=value\n" line per property, sorted by key
//!                               (byte order; a block out of order or with a key twice is refused)
//! 44+n    4   CRC-32            u32, CRC-32 of bytes 0..44+n
//! ```
//!
//! The file is written once, at creation, to `presso.pool.tmp`, synced, and renamed into place, so
//! it is never seen half-written. docs/design.md mirrors this map.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Result, StoreError};

/// Name of the header file in the pool directory.
pub const POOL_FILE: &str = "presso.pool";
/// Name the header is written under before it is renamed into place.
pub const POOL_TMP_FILE: &str = "presso.pool.tmp";
/// The eight bytes the header starts with.
pub const POOL_MAGIC: [u8; 8] = *b"PRESSOPL";
/// The pool format version this build writes and reads.
pub const POOL_VERSION: u16 = 1;
/// Largest properties block.
pub const MAX_PROPERTIES_LEN: usize = 64 << 10;

/// Offset of the magic.
pub const OFF_MAGIC: usize = 0;
/// Offset of the format version.
pub const OFF_VERSION: usize = 8;
/// Offset of the reserved field.
pub const OFF_RESERVED: usize = 10;
/// Offset of the pool uuid.
pub const OFF_UUID: usize = 12;
/// Offset of the creation time (seconds).
pub const OFF_CREATED_SECS: usize = 28;
/// Offset of the creation time (nanoseconds).
pub const OFF_CREATED_NANOS: usize = 36;
/// Offset of the properties length.
pub const OFF_PROPS_LEN: usize = 40;
/// Offset of the properties block.
pub const OFF_PROPS: usize = 44;
/// Header length without properties (fixed fields and the CRC).
pub const FIXED_LEN: usize = OFF_PROPS + 4;

/// The decoded pool header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolHeader {
    /// Format version (always [`POOL_VERSION`] once decoded).
    pub version: u16,
    /// Random pool identity; every segment header repeats it.
    pub uuid: [u8; 16],
    /// Creation time, seconds since the Unix epoch.
    pub created_secs: u64,
    /// Creation time, nanoseconds part.
    pub created_nanos: u32,
    /// Creation properties (for example `compression=lz4`).
    pub properties: BTreeMap<String, String>,
}

/// Checks that a property can be stored: a non-empty key without `=`, newline or NUL; a value
/// without newline or NUL.
pub fn check_property(key: &str, value: &str) -> Result<()> {
    let bad = |reason| {
        Err(StoreError::BadProperty {
            key: key.to_string(),
            reason,
        })
    };
    if key.is_empty() {
        return bad("empty key");
    }
    if key.contains(['=', '\n', '\0']) {
        return bad("the key contains '=', a newline or NUL");
    }
    if value.contains(['\n', '\0']) {
        return bad("the value contains a newline or NUL");
    }
    Ok(())
}

impl PoolHeader {
    /// A new header with a random uuid and the current time.
    pub fn new(properties: BTreeMap<String, String>) -> Result<Self> {
        for (k, v) in &properties {
            check_property(k, v)?;
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let header = Self {
            version: POOL_VERSION,
            uuid: rand::random(),
            created_secs: now.as_secs(),
            created_nanos: now.subsec_nanos(),
            properties,
        };
        if header.properties_block().len() > MAX_PROPERTIES_LEN {
            return Err(StoreError::BadProperty {
                key: String::new(),
                reason: "the properties are larger than 64 KiB",
            });
        }
        Ok(header)
    }

    fn properties_block(&self) -> Vec<u8> {
        let mut block = Vec::new();
        for (k, v) in &self.properties {
            block.extend_from_slice(k.as_bytes());
            block.push(b'=');
            block.extend_from_slice(v.as_bytes());
            block.push(b'\n');
        }
        block
    }

    /// The header's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let props = self.properties_block();
        let mut out = Vec::with_capacity(FIXED_LEN + props.len());
        out.extend_from_slice(&POOL_MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&self.uuid);
        out.extend_from_slice(&self.created_secs.to_le_bytes());
        out.extend_from_slice(&self.created_nanos.to_le_bytes());
        out.extend_from_slice(&(props.len() as u32).to_le_bytes());
        out.extend_from_slice(&props);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a header; `file` names it in errors. Order: magic → version → length → CRC →
    /// fields.
    pub fn decode(bytes: &[u8], file: &str) -> Result<Self> {
        let corrupt = |offset: usize, reason: String| StoreError::Corrupt {
            file: file.to_string(),
            offset: offset as u64,
            reason,
        };
        if bytes.len() < POOL_MAGIC.len() || bytes[OFF_MAGIC..OFF_VERSION] != POOL_MAGIC {
            return Err(StoreError::NotAPool {
                file: file.to_string(),
                reason: "the file does not start with the pool magic \"PRESSOPL\"".to_string(),
            });
        }
        if bytes.len() < OFF_RESERVED {
            return Err(corrupt(
                bytes.len(),
                "truncated before the version".to_string(),
            ));
        }
        let version = u16_at(bytes, OFF_VERSION);
        if version > POOL_VERSION {
            return Err(StoreError::NewerVersion {
                file: file.to_string(),
                found: version,
                supported: POOL_VERSION,
            });
        }
        if version == 0 {
            return Err(corrupt(OFF_VERSION, "format version 0".to_string()));
        }
        if bytes.len() < FIXED_LEN {
            return Err(corrupt(
                bytes.len(),
                format!("truncated: {} bytes", bytes.len()),
            ));
        }
        let props_len = u32_at(bytes, OFF_PROPS_LEN) as usize;
        if props_len > MAX_PROPERTIES_LEN {
            return Err(corrupt(
                OFF_PROPS_LEN,
                format!("properties length {props_len} too large"),
            ));
        }
        let crc_at = OFF_PROPS + props_len;
        if bytes.len() != crc_at + 4 {
            return Err(corrupt(
                bytes.len().min(crc_at),
                format!(
                    "length {} but the header declares {}",
                    bytes.len(),
                    crc_at + 4
                ),
            ));
        }
        let stored = u32_at(bytes, crc_at);
        let computed = crc32fast::hash(&bytes[..crc_at]);
        if stored != computed {
            return Err(corrupt(
                crc_at,
                format!("header CRC-32 mismatch (stored {stored:08x}, computed {computed:08x})"),
            ));
        }
        if u16_at(bytes, OFF_RESERVED) != 0 {
            return Err(corrupt(
                OFF_RESERVED,
                "reserved field is not zero".to_string(),
            ));
        }
        let created_nanos = u32_at(bytes, OFF_CREATED_NANOS);
        if created_nanos >= 1_000_000_000 {
            return Err(corrupt(
                OFF_CREATED_NANOS,
                "creation nanoseconds out of range".to_string(),
            ));
        }
        let block = &bytes[OFF_PROPS..crc_at];
        let text = std::str::from_utf8(block).map_err(|e| {
            corrupt(
                OFF_PROPS + e.valid_up_to(),
                "properties are not UTF-8".to_string(),
            )
        })?;
        let mut properties = BTreeMap::new();
        let mut pos = OFF_PROPS;
        // Lines are sorted by key, so a header has exactly one encoding.
        let mut previous: Option<&str> = None;
        for line in text.split_inclusive('\n') {
            let body = line
                .strip_suffix('\n')
                .ok_or_else(|| corrupt(pos, "property line without newline".to_string()))?;
            let (k, v) = body
                .split_once('=')
                .ok_or_else(|| corrupt(pos, "property line without '='".to_string()))?;
            check_property(k, v).map_err(|e| corrupt(pos, e.to_string()))?;
            match previous {
                Some(p) if p == k => {
                    return Err(corrupt(pos, format!("property {k:?} appears twice")))
                }
                Some(p) if p > k => {
                    return Err(corrupt(
                        pos,
                        format!("property {k:?} is out of order (after {p:?})"),
                    ))
                }
                _ => {}
            }
            previous = Some(k);
            properties.insert(k.to_string(), v.to_string());
            pos += line.len();
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&bytes[OFF_UUID..OFF_UUID + 16]);
        Ok(Self {
            version,
            uuid,
            created_secs: u64_at(bytes, OFF_CREATED_SECS),
            created_nanos,
            properties,
        })
    }
}

pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
