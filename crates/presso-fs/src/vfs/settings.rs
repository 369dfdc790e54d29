//! What new records of a file are written with: codec, compression options and record size,
//! from the properties the file inherits, kept per open file and per directory of new files.

use super::*;

impl Vfs {
    /// Codec and options of new records of `ino`, cached until a property changes or a rename
    /// moves something to another directory.
    pub(super) fn settings(&self, ino: u64, st: &mut FileState) -> Result<(CodecSpec, JobOptions)> {
        let generation = self.props_generation.load(Ordering::SeqCst);
        if let Some((g, spec, options)) = st.settings {
            if g == generation {
                return Ok((spec, options));
            }
        }
        let (spec, options) = self.codec_settings(ino)?;
        st.settings = Some((generation, spec, options));
        Ok((spec, options))
    }

    /// The settings of a file created in directory `dir` just now (codec, options, record
    /// size): a new file has no properties of its own, so they are the directory's, which are
    /// kept per directory (one lookup for all the files made there, instead of a walk to the
    /// root for each).
    pub(super) fn settings_of_new_file(&self, dir: u64) -> Result<DirSettings> {
        let generation = self.props_generation.load(Ordering::SeqCst);
        let mut known = self.dir_settings.lock();
        if let Some(&settings) = known.get(&dir) {
            if settings.generation == generation {
                return Ok(settings);
            }
        }
        drop(known);
        let names = [
            props::COMPRESSION,
            props::THRESHOLD,
            props::OFFLOAD,
            props::RECORDSIZE,
        ];
        let values = self.pool.get_props(dir, &names)?;
        let (spec, options) = codec_of(&values[..3])?;
        let recordsize = recordsize_of(&values[3].0)?;
        let settings = DirSettings {
            generation,
            spec,
            options,
            recordsize,
        };
        known = self.dir_settings.lock();
        if known.len() >= DIR_SETTINGS_KEPT {
            known.clear();
        }
        known.insert(dir, settings);
        Ok(settings)
    }

    /// The effective compression, threshold and offload properties of `ino`, parsed.
    fn codec_settings(&self, ino: u64) -> Result<(CodecSpec, JobOptions)> {
        let values = self
            .pool
            .get_props(ino, &[props::COMPRESSION, props::THRESHOLD, props::OFFLOAD])?;
        codec_of(&values)
    }
}

/// Codec and options from the effective `compression`, `threshold` and `offload` values, in
/// that order.
fn codec_of(values: &[(String, Option<u64>)]) -> Result<(CodecSpec, JobOptions)> {
    let [compression, threshold, offload] = [0, 1, 2].map(|i| values[i].0.as_str());
    let spec: CodecSpec = compression
        .parse()
        .map_err(|e: presso_codec::SpecError| FsError::Property(e.to_string()))?;
    let threshold = threshold
        .parse()
        .map_err(|e: presso_codec::ThresholdError| FsError::Property(e.to_string()))?;
    let offload = offload.parse::<Offload>().map_err(FsError::Property)?;
    let options = JobOptions {
        threshold,
        offload: offload != Offload::Off,
    };
    Ok((spec, options))
}

/// A record size property's value in bytes.
pub(super) fn recordsize_of(value: &str) -> Result<u64> {
    Ok(crate::units::parse_recordsize(value).map_err(FsError::Property)? as u64)
}
