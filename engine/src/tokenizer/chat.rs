//! Chat templates: Hugging Face-style Jinja templates rendered with minijinja
//! the way `transformers.apply_chat_template` renders them (trim_blocks,
//! lstrip_blocks, loop controls, Python string methods via minijinja-contrib's
//! pycompat, `raise_exception`, and a Python-compatible `tojson`). Owns template
//! compilation and rendering only; it knows nothing about token IDs.

use crate::error::{EngineError, Result};
use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, ErrorKind};
use serde::{Deserialize, Serialize};

/// One chat message as the OpenAI API and HF templates see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage { role: role.into(), content: content.into() }
    }
}

const NAME: &str = "chat";

/// A compiled chat template.
pub struct ChatTemplate {
    source: String,
    env: Environment<'static>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").field("len", &self.source.len()).finish()
    }
}

fn raise_exception(msg: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
}

/// Python's `json.dumps(x, ensure_ascii=False)` with optional `indent`, as
/// transformers' `tojson` filter produces it (`", "` and `": "` separators).
fn tojson(v: Value, kwargs: Kwargs) -> std::result::Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let json =
        serde_json::to_value(&v).map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let mut out = String::new();
    write_py_json(&json, indent, 0, &mut out);
    Ok(Value::from_safe_string(out))
}

fn write_py_json(v: &serde_json::Value, indent: Option<usize>, depth: usize, out: &mut String) {
    use serde_json::Value as J;
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v {
        J::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, it) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                write_py_json(it, indent, depth + 1, out);
            }
            newline(out, depth);
            out.push(']');
        }
        J::Object(map) if !map.is_empty() => {
            out.push('{');
            for (i, (k, it)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                out.push_str(&J::String(k.clone()).to_string());
                out.push_str(": ");
                write_py_json(it, indent, depth + 1, out);
            }
            newline(out, depth);
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

impl ChatTemplate {
    /// Compiles `source`; a syntax error is an `EngineError::Template`.
    pub fn new(source: &str) -> Result<Self> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, source.to_string())
            .map_err(|e| EngineError::Template(format!("cannot compile the chat template: {e:#}")))?;
        Ok(ChatTemplate { source: source.to_string(), env })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders with `messages`, `add_generation_prompt`, the special-token
    /// strings the template may use, and any extra variables (e.g.
    /// `enable_thinking`) from `extra`.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        bos_token: Option<&str>,
        eos_token: Option<&str>,
        extra: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String> {
        let mut ctx = extra.clone();
        let mut set = |k: &str, v: serde_json::Value| {
            ctx.insert(k.to_string(), v);
        };
        set("messages", serde_json::to_value(messages).map_err(|e| EngineError::Template(e.to_string()))?);
        set("add_generation_prompt", serde_json::Value::Bool(add_generation_prompt));
        if let Some(b) = bos_token {
            set("bos_token", serde_json::Value::String(b.to_string()));
        }
        if let Some(e) = eos_token {
            set("eos_token", serde_json::Value::String(e.to_string()));
        }
        let tmpl = self.env.get_template(NAME).map_err(|e| EngineError::Template(format!("{e:#}")))?;
        tmpl.render(Value::from_serialize(&ctx))
            .map_err(|e| EngineError::Template(format!("cannot render the chat template: {e:#}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, msgs: &[ChatMessage], gen_prompt: bool) -> Result<String> {
        ChatTemplate::new(src)?.render(msgs, gen_prompt, Some("<s>"), Some("</s>"), &Default::default())
    }

    #[test]
    fn python_string_methods_and_blocks_trimming() {
        let src = "{% for m in messages %}\n  {% if m.content.startswith('a') %}{{ m.content.split(',')[-1].strip() | upper }}{% endif %}\n{% endfor %}{{ bos_token }}";
        let out = render(src, &[ChatMessage::new("user", "a, b "), ChatMessage::new("user", "zz")], false).unwrap();
        assert_eq!(out, "B<s>");
    }

    #[test]
    fn raise_exception_and_syntax_errors_are_template_errors() {
        let e = render("{{ raise_exception('roles must alternate') }}", &[], false).unwrap_err();
        assert!(matches!(&e, EngineError::Template(m) if m.contains("roles must alternate")), "{e}");
        let e = ChatTemplate::new("{% if %}").unwrap_err();
        assert!(matches!(e, EngineError::Template(_)));
    }

    #[test]
    fn tojson_matches_python_json_dumps() {
        let out =
            render("{{ {'a': [1, 'é<'], 'b': {}} | tojson }}|{{ [1, {'k': true}] | tojson(indent=2) }}", &[], false)
                .unwrap();
        assert_eq!(out, "{\"a\": [1, \"é<\"], \"b\": {}}|[\n  1,\n  {\n    \"k\": true\n  }\n]");
    }
}
