//! Reading the applications' input files: bounded (a file larger than its program
//! takes is refused before it is read whole) and checked to be UTF-8 text, with
//! errors that name the file.

use std::io::Read as _;
use std::path::Path;

/// The text of `path`, at most `max` bytes; `what` says in the error what the limit
/// is for (`"the most an instance file may hold"`).
pub fn read_text(path: &Path, max: u64, what: &str) -> Result<String, String> {
    let name = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("{name}: {e}"))?;
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{name}: {e}"))?;
    if bytes.len() as u64 > max {
        return Err(format!("{name}: larger than {max} bytes ({what})"));
    }
    String::from_utf8(bytes).map_err(|e| format!("{name}: not UTF-8 text: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_read_up_to_its_limit_and_refused_past_it() {
        let dir = std::env::temp_dir().join(format!("ibis-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t.txt");
        std::fs::write(&f, "12345").unwrap();
        assert_eq!(read_text(&f, 5, "x").unwrap(), "12345");
        let e = read_text(&f, 4, "the limit").unwrap_err();
        assert!(
            e.contains("larger than 4 bytes (the limit)") && e.contains("t.txt"),
            "{e}"
        );
        std::fs::write(&f, [0xff, 0xfe]).unwrap();
        assert!(read_text(&f, 5, "x").unwrap_err().contains("not UTF-8"));
        assert!(read_text(&dir.join("none"), 5, "x")
            .unwrap_err()
            .contains("none"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
