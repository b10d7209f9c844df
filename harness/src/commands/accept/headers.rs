//! The client headers of `harness accept`: `--api-key-env VAR` (the key from that
//! variable, sent as `Authorization: Bearer`) and repeated `--header 'Name: value'`,
//! on every request of the suite, built by the arms' own code
//! (`crate::arm::client_headers`); with `--plan --arm`, the arm's `api_key_env` and
//! `headers` first, the flags after (a flag replaces an arm header of its name).
//! Owns parsing and checking the flags. Must not write, print or record the key;
//! the outcome's settings keep the variable's name and the headers' names only.

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::{AcceptArgs, AcceptError};
use crate::arm::ArmError;

fn bad(m: impl Into<String>) -> AcceptError {
    AcceptError::Args(m.into())
}

/// `Name: value` as a header; a bad name or value is an argument error (exit 2).
pub fn parse_header(flag: &str) -> Result<(String, String), AcceptError> {
    let (name, value) = flag
        .split_once(':')
        .ok_or_else(|| bad(format!("--header {flag:?}: give 'Name: value' (a colon after the name)")))?;
    let (name, value) = (name.trim(), value.trim());
    if HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(bad(format!("--header: {name:?} is not a valid HTTP header name")));
    }
    if HeaderValue::from_str(value).is_err() {
        return Err(bad(format!("--header {name}: the value is not a valid HTTP header value (visible ASCII)")));
    }
    Ok((name.to_string(), value.to_string()))
}

/// The flags' checks that need no server: header syntax, a variable name (never a
/// key) for `--api-key-env`, and not both it and an `Authorization` header.
pub fn check(args: &AcceptArgs) -> Result<(), AcceptError> {
    let headers = args.headers.iter().map(|h| parse_header(h)).collect::<Result<Vec<_>, _>>()?;
    if let Some(var) = &args.api_key_env {
        let ok = !var.is_empty()
            && !var.as_bytes()[0].is_ascii_digit()
            && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok {
            return Err(bad(
                "--api-key-env: not an environment variable name ([A-Za-z_][A-Za-z0-9_]*): give the NAME of the \
                 variable that holds the key, never the key itself",
            ));
        }
        if headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("authorization")) {
            return Err(bad("--header Authorization and --api-key-env both set it: give one or the other"));
        }
    }
    Ok(())
}

/// Every request's headers: `base` (a plan arm's), then the flags; `env` reads a
/// variable (the process environment in production).
pub fn build(
    args: &AcceptArgs,
    base: HeaderMap,
    env: impl Fn(&str) -> Option<String>,
) -> Result<HeaderMap, AcceptError> {
    let pairs = args.headers.iter().map(|h| parse_header(h)).collect::<Result<Vec<_>, _>>()?;
    let flags = pairs.iter().map(|(n, v)| (n.as_str(), v.as_str()));
    let own = crate::arm::client_headers("accept", args.api_key_env.as_deref(), flags, env).map_err(|e| match e {
        ArmError::MissingApiKey { var, .. } => bad(format!(
            "--api-key-env names the environment variable {var}, which is not set (or empty): export it with the \
             key first (the flag names the variable, never the key)"
        )),
        ArmError::BadApiKey { var, .. } => bad(format!("the key in {var} is not a valid HTTP header value")),
        other => AcceptError::Arm(other),
    })?;
    let mut map = base;
    for (name, value) in own {
        if let Some(name) = name {
            map.insert(name, value);
        }
    }
    Ok(map)
}

/// How `--header` flags are recorded in the outcome's settings: names only.
pub fn header_names<S: serde::Serializer>(headers: &[String], ser: S) -> Result<S::Ok, S::Error> {
    let names: Vec<String> = headers
        .iter()
        .map(|h| format!("{}: (value not recorded)", h.split_once(':').map_or(h.as_str(), |p| p.0).trim()))
        .collect();
    serde::Serialize::serialize(&names, ser)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::AUTHORIZATION;

    fn args(flags: &[&str]) -> AcceptArgs {
        let mut all = vec!["--url", "http://127.0.0.1:1"];
        all.extend_from_slice(flags);
        AcceptArgs::try_parse_from(all).expect("flags parse")
    }

    #[test]
    fn flags_become_headers_and_the_key_comes_from_its_variable() {
        let a = args(&["--api-key-env", "K", "--header", "X-Tenant: blue", "--header", "X-Trace:1"]);
        check(&a).unwrap();
        let env = |v: &str| (v == "K").then(|| "sk-secret".to_string());
        let mut base = HeaderMap::new();
        base.insert("x-tenant", HeaderValue::from_static("red"));
        base.insert("x-arm", HeaderValue::from_static("a"));
        let map = build(&a, base, env).unwrap();
        assert_eq!(map.get(AUTHORIZATION).unwrap(), "Bearer sk-secret");
        assert_eq!((map["x-tenant"].to_str().unwrap(), map["x-trace"].to_str().unwrap()), ("blue", "1"), "a flag wins");
        assert_eq!(map.get("x-arm").unwrap(), "a", "the arm's own headers stay");
        let settings = serde_json::to_string(&a).unwrap();
        assert!(settings.contains("\"api_key_env\":\"K\"") && settings.contains("X-Tenant: (value not recorded)"));
        assert!(!settings.contains("blue") && !settings.contains("sk-secret"), "{settings}");
    }

    #[test]
    fn bad_flags_are_argument_errors_that_never_echo_a_key() {
        for (flags, want) in [
            (&["--header", "no colon"][..], "give 'Name: value'"),
            (&["--header", "Bad Name: x"], "not a valid HTTP header name"),
            (&["--header", "X: a\u{7f}b"], "not a valid HTTP header value"),
            (&["--api-key-env", "sk-live-123"], "never the key itself"),
            (&["--api-key-env", "K", "--header", "Authorization: Bearer x"], "give one or the other"),
        ] {
            let err = check(&args(flags)).unwrap_err();
            assert!(matches!(err, AcceptError::Args(_)) && err.to_string().contains(want), "{flags:?}: {err}");
            assert!(!err.to_string().contains("sk-live-123"), "{err}");
        }
        let err = build(&args(&["--api-key-env", "UNSET_K"]), HeaderMap::new(), |_| None).unwrap_err();
        assert!(err.to_string().contains("UNSET_K") && err.to_string().contains("not set"), "{err}");
    }
}
