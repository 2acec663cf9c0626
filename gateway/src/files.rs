//! Small files in the data directory that must survive a crash whole.

use std::fs;
use std::io::Write as _;
use std::path::Path;

/// Replaces the file at `path` with `contents`, durably: written and
/// synced beside it, renamed over it, and the directory synced, so that a
/// crash leaves either the old file or the new one, never a part.
pub(crate) fn replace(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = fs::File::create(&tmp)?;
    file.write_all(contents)?;
    file.sync_all()?;
    fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_replaced_file_holds_the_new_contents_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("counter");
        super::replace(&path, b"1000\n").unwrap();
        super::replace(&path, b"2000\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "2000\n");
        assert!(!path.with_extension("tmp").exists());
    }
}
