//! A Hugging Face hub name (`Qwen/Qwen3-0.6B`) as the file the local Hugging Face
//! cache holds for it, the way `huggingface_hub` resolves a name offline
//! (`HF_HUB_OFFLINE=1`): the cache is `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
//! `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`; a model
//! `org/name` lives in `models--org--name`, its `refs/<revision>` names a commit,
//! and the file is `snapshots/<commit>/<file>` (a revision that is itself a commit
//! names its snapshot directly). Owns that lookup. Must not fetch anything: a name
//! the cache lacks is `None`, and the caller says so.

use std::path::{Path, PathBuf};

/// The hub cache directory, from the environment as `huggingface_hub` reads it.
pub fn hub_cache_dir() -> Option<PathBuf> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(d) = var("HF_HUB_CACHE") {
        return Some(d);
    }
    if let Some(d) = var("HF_HOME") {
        return Some(d.join("hub"));
    }
    let cache = var("XDG_CACHE_HOME").or_else(|| var("HOME").map(|h| h.join(".cache")))?;
    Some(cache.join("huggingface").join("hub"))
}

/// `file` of model `repo` at `revision` (`main` by default) in the cache at `cache`.
pub fn cached_file_in(cache: &Path, repo: &str, revision: &str, file: &str) -> Option<PathBuf> {
    let parts: Vec<&str> = repo.split('/').collect();
    if parts.is_empty() || parts.len() > 2 || parts.iter().any(|p| p.is_empty() || *p == "." || *p == "..") {
        return None;
    }
    let dir = cache.join(format!("models--{}", parts.join("--")));
    let commit = std::fs::read_to_string(dir.join("refs").join(revision))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| revision.to_string());
    if commit.is_empty() || commit.contains(['/', '\\']) || commit == ".." {
        return None;
    }
    let path = dir.join("snapshots").join(commit).join(file);
    path.is_file().then_some(path)
}

/// `file` of model `repo` at `revision` in the cache the environment names.
pub fn cached_file(repo: &str, revision: &str, file: &str) -> Option<PathBuf> {
    cached_file_in(&hub_cache_dir()?, repo, revision, file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hub_name_resolves_through_refs_to_its_snapshot() {
        let tmp = tempfile::tempdir().unwrap();
        let model = tmp.path().join("models--Org--M-1");
        std::fs::create_dir_all(model.join("refs")).unwrap();
        std::fs::write(model.join("refs/main"), "abc123\n").unwrap();
        std::fs::create_dir_all(model.join("snapshots/abc123")).unwrap();
        std::fs::write(model.join("snapshots/abc123/tokenizer.json"), "{}").unwrap();
        let got = cached_file_in(tmp.path(), "Org/M-1", "main", "tokenizer.json").unwrap();
        assert_eq!(got, model.join("snapshots/abc123/tokenizer.json"));
        // A commit given as the revision names its snapshot; unknown names are None.
        assert!(cached_file_in(tmp.path(), "Org/M-1", "abc123", "tokenizer.json").is_some());
        assert!(cached_file_in(tmp.path(), "Org/M-1", "dev", "tokenizer.json").is_none());
        assert!(cached_file_in(tmp.path(), "Org/Other", "main", "tokenizer.json").is_none());
        assert!(cached_file_in(tmp.path(), "../x", "main", "tokenizer.json").is_none());
        assert!(cached_file_in(tmp.path(), "Org/M-1", "main", "config.json").is_none());
    }
}
