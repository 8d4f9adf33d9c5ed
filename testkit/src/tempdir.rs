//! A directory of its own for each test, removed with everything in it when dropped (also
//! when the test panics: the drop runs during unwinding).

use std::{
    ffi::OsStr,
    ops::Deref,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU32, Ordering},
};

/// A new empty directory under the system's temporary directory, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates `herd-<tag>-<pid>-<n>`: the process id keeps parallel test binaries apart, the
    /// counter the tests of one binary. A directory of that name left by an earlier process
    /// with the same id (one that was killed) is emptied first. Panics if it cannot.
    pub fn new(tag: &str) -> Self {
        Self::try_new(tag).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Self::new`], with the error (naming the directory) returned.
    pub fn try_new(tag: &str) -> std::io::Result<Self> {
        static N: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "herd-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        match std::fs::create_dir_all(&path) {
            Ok(()) => Ok(Self(path)),
            Err(e) => Err(std::io::Error::new(
                e.kind(),
                format!("creating the temporary directory {}: {e}", path.display()),
            )),
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `contents` to `name` in the directory and returns the file's path.
    pub fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let file = self.0.join(name);
        std::fs::write(&file, contents)
            .unwrap_or_else(|e| panic!("writing {}: {e}", file.display()));
        file
    }
}

impl Deref for TempDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

/// So a command takes it as an argument (`.arg(&dir)`).
impl AsRef<OsStr> for TempDir {
    fn as_ref(&self) -> &OsStr {
        self.0.as_os_str()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_is_new_and_empty_and_goes_with_its_contents() {
        let (a, b) = (TempDir::new("testkit"), TempDir::new("testkit"));
        assert_ne!(a.path(), b.path());
        let file = a.write("y.txt", "hello");
        std::fs::create_dir_all(a.join("sub/deeper")).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "hello");
        assert_eq!(std::fs::read_dir(b.path()).unwrap().count(), 0);
        let kept = a.path().to_owned();
        drop(a);
        assert!(!kept.exists(), "{} outlived its TempDir", kept.display());
        assert!(b.exists());
    }
}
