//! How the harness reaches an arm that needs credentials: `api_key_env` names an
//! environment variable whose value is sent as `Authorization: Bearer <value>`, and
//! `headers` are extra headers with literal values, both on every request of the
//! arm's client (and of `harness accept`'s, through `client_headers`). Owns building that header map and checking, before anything is
//! written, that every named variable is set, and the study's `Secrets` (the keys
//! the evidence is scrubbed of). Must not write, print or record the key: it lives
//! only in the header map (marked sensitive, so `Debug` hides it) and `Secrets`.

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};

use super::ArmError;
use crate::plan::{Arm, Plan};

/// The headers of every request to `arm`; `env` reads a variable (the process
/// environment in production, a table in tests).
pub fn arm_headers(arm: &Arm, env: impl Fn(&str) -> Option<String>) -> Result<HeaderMap, ArmError> {
    let headers = arm.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
    client_headers(&arm.name, arm.api_key_env.as_deref(), headers, env)
}

/// The headers of a client: `headers` (already validated: a bad one is skipped,
/// never sent half), then `Authorization: Bearer` from the variable `api_key_env`.
/// `who` names the client in errors (an arm's name; `harness accept` uses it too).
pub fn client_headers<'a>(
    who: &str,
    api_key_env: Option<&str>,
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<HeaderMap, ArmError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
            map.insert(n, v);
        }
    }
    if let Some(var) = api_key_env {
        let missing = || ArmError::MissingApiKey { arm: who.to_string(), var: var.to_string() };
        let key = env(var).filter(|k| !k.is_empty()).ok_or_else(missing)?;
        let mut value = HeaderValue::from_str(&format!("Bearer {key}"))
            .map_err(|_| ArmError::BadApiKey { arm: who.to_string(), var: var.to_string() })?;
        value.set_sensitive(true);
        map.insert(AUTHORIZATION, value);
    }
    Ok(map)
}

/// The keys of every arm's `api_key_env` that is set: what the evidence must never
/// hold (`evidence::Secrets`).
pub fn plan_secrets(plan: &Plan, env: impl Fn(&str) -> Option<String>) -> crate::evidence::Secrets {
    crate::evidence::Secrets::new(plan.arms.iter().filter_map(|a| a.api_key_env.as_deref()).filter_map(env))
}

/// Every arm's `api_key_env` is set (what `run` checks before it writes anything).
pub fn check_api_keys(plan: &Plan, env: impl Fn(&str) -> Option<String>) -> Result<(), ArmError> {
    for arm in &plan.arms {
        arm_headers(arm, &env)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::plan::{ArmRole, Server};

    fn arm(api_key_env: Option<&str>, headers: &[(&str, &str)]) -> Arm {
        Arm {
            name: "a".into(),
            role: ArmRole::Control,
            server: Server::External { url: "http://127.0.0.1:1".into() },
            env: BTreeMap::new(),
            health: "/health".into(),
            startup_timeout_s: 1.0,
            stop_grace_s: 1.0,
            receipts: None,
            tokenizer: None,
            max_start_failures: 2,
            api_key_env: api_key_env.map(String::from),
            headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            identity: None,
            cpus: None,
        }
    }

    #[test]
    fn the_key_comes_from_the_named_variable_and_is_hidden_from_debug() {
        let env = |v: &str| (v == "MY_KEY").then(|| "sk-secret-123".to_string());
        let map = arm_headers(&arm(Some("MY_KEY"), &[("X-Tenant", "blue")]), env).unwrap();
        assert_eq!(map.get(AUTHORIZATION).unwrap().to_str().unwrap(), "Bearer sk-secret-123");
        assert!(map.get(AUTHORIZATION).unwrap().is_sensitive());
        assert_eq!(map.get("x-tenant").unwrap(), "blue");
        assert!(!format!("{map:?}").contains("sk-secret-123"), "{map:?}");
    }

    #[test]
    fn a_missing_or_empty_variable_is_named_without_any_key() {
        let err = arm_headers(&arm(Some("MY_KEY"), &[]), |_| None).unwrap_err();
        assert!(matches!(&err, ArmError::MissingApiKey { var, .. } if var == "MY_KEY"), "{err}");
        assert!(err.to_string().contains("MY_KEY"));
        let empty = arm_headers(&arm(Some("MY_KEY"), &[]), |_| Some(String::new())).unwrap_err();
        assert!(matches!(empty, ArmError::MissingApiKey { .. }));
        let bad = arm_headers(&arm(Some("MY_KEY"), &[]), |_| Some("a\nb".into())).unwrap_err();
        assert!(matches!(bad, ArmError::BadApiKey { .. }) && !bad.to_string().contains("a\nb"));
        assert!(arm_headers(&arm(None, &[]), |_| None).unwrap().is_empty());
    }
}
