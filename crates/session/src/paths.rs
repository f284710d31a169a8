//! Paths stored in checkpoints, relative to the checkpoint folder.

use std::path::{Component, Path, PathBuf};

/// `path` as seen from the folder `base` (`../m.jsonl`), computed on the absolute, lexically
/// normalised forms of both (no symbolic link is resolved); `path` absolute when that fails.
pub fn relative_to(path: &Path, base: &Path) -> PathBuf {
    let (Ok(p), Ok(b)) = (std::path::absolute(path), std::path::absolute(base)) else {
        return path.to_path_buf();
    };
    let (p, b) = (normalise(&p), normalise(&b));
    let pc: Vec<Component> = p.components().collect();
    let bc: Vec<Component> = b.components().collect();
    // Different roots (prefixes on Windows): no relative form.
    if pc.first() != bc.first() {
        return p;
    }
    let common = pc.iter().zip(&bc).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..bc.len() {
        out.push("..");
    }
    for c in &pc[common..] {
        out.push(c.as_os_str());
    }
    if out.as_os_str().is_empty() { PathBuf::from(".") } else { out }
}

/// `path` relative to the folder `base` when it is relative; as it is otherwise.
pub fn resolve_against(path: &Path, base: &Path) -> PathBuf {
    if path.is_absolute() { path.to_path_buf() } else { normalise(&base.join(path)) }
}

/// Removes `.` and folds `..` into the component before it, without touching the disk.
fn normalise(path: &Path) -> PathBuf {
    let mut out: Vec<Component> = vec![];
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => match out.last() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir) | Some(Component::Prefix(_)) => {}
                _ => out.push(c),
            },
            _ => out.push(c),
        }
    }
    out.iter().map(|c| c.as_os_str()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_forms_round_trip() {
        let cases = [
            ("/a/b/m.jsonl", "/a/b/ck", "../m.jsonl"),
            ("/a/b/ck/m.jsonl", "/a/b/ck", "m.jsonl"),
            ("/x/m.jsonl", "/a/b/ck", "../../../x/m.jsonl"),
            ("/a/./b/../b/m.jsonl", "/a/b/ck/", "../m.jsonl"),
        ];
        for (p, b, want) in cases {
            let r = relative_to(Path::new(p), Path::new(b));
            assert_eq!(r, PathBuf::from(want), "{p} from {b}");
            assert_eq!(resolve_against(&r, Path::new(b)), normalise(Path::new(p)));
        }
        // Relative inputs are taken from the working directory.
        let r = relative_to(Path::new("m.jsonl"), Path::new("ck"));
        assert_eq!(r, PathBuf::from("../m.jsonl"));
        assert_eq!(resolve_against(Path::new("/abs/m"), Path::new("/x")), PathBuf::from("/abs/m"));
    }
}
