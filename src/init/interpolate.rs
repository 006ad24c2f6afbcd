//! Compose's variable interpolation, as the Compose Specification defines
//! it: `$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR-default}`,
//! `${VAR:?error}`, `${VAR?error}`, `${VAR:+alt}`, `${VAR+alt}`, defaults
//! and alternatives that hold interpolations themselves
//! (`${A:-${B:-x}}`), and `$$` for a literal `$`. An unset variable with
//! no default is empty, as compose makes it.
//!
//! The result says whether anything was substituted: `init` may decide
//! from such text (which image, which ports) but never writes it, since it
//! may hold a value from `.env` or the shell.

/// Text after interpolation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interpolated {
    /// The text.
    pub text: String,
    /// Whether any of it came from a variable or a `${…}` default, so
    /// it must not be written into `binky.toml`.
    pub substituted: bool,
}

/// Why a text cannot be interpolated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InterpError {
    /// `${VAR:?message}` (or `?`) with the variable unset (or empty).
    Required {
        /// The variable.
        name: String,
        /// The file's own message after `?`.
        message: String,
    },
    /// A `$` compose cannot read (`$ `, `${}`, `${1X}`, an unclosed `${`).
    Invalid(String),
}

impl std::fmt::Display for InterpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InterpError::Required { name, message } if message.is_empty() => {
                write!(f, "variable {name} is required and not set")
            }
            InterpError::Required { name, message } => {
                write!(f, "variable {name} is required and not set: {message}")
            }
            InterpError::Invalid(why) => write!(f, "{why}"),
        }
    }
}

/// Interpolates `text`, reading variables through `lookup`.
///
/// # Errors
/// A required variable that is not set, or a `$` that starts no valid
/// interpolation (write `$$` for a literal `$`).
pub fn interpolate(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Interpolated, InterpError> {
    let mut out = Interpolated {
        text: String::new(),
        substituted: false,
    };
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.text.push_str(&rest[..at]);
        rest = &rest[at + 1..];
        if let Some(r) = rest.strip_prefix('$') {
            out.text.push('$');
            rest = r;
        } else if let Some(r) = rest.strip_prefix('{') {
            let close = matching_brace(r).ok_or_else(|| {
                InterpError::Invalid(format!("`${{` with no closing `}}` in {text:?}"))
            })?;
            let v = braced(&r[..close], lookup)?;
            out.text.push_str(&v.text);
            out.substituted = true;
            rest = &r[close + 1..];
        } else {
            let n = name_len(rest);
            if n == 0 {
                return Err(InterpError::Invalid(format!(
                    "a `$` that names no variable in {text:?}: write `$$` for a literal `$`"
                )));
            }
            out.text.push_str(&lookup(&rest[..n]).unwrap_or_default());
            out.substituted = true;
            rest = &rest[n..];
        }
    }
    out.text.push_str(rest);
    Ok(out)
}

/// The length of the variable name `s` starts with (`[A-Za-z_][A-Za-z0-9_]*`).
fn name_len(s: &str) -> usize {
    let b = s.as_bytes();
    if b.first()
        .is_none_or(|c| !(c.is_ascii_alphabetic() || *c == b'_'))
    {
        return 0;
    }
    b.iter()
        .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
        .count()
}

/// Where the `}` that closes a `${` is in `s` (which starts after it),
/// counting nested `${…}` and skipping `$$`.
fn matching_brace(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'$' if b.get(i + 1) == Some(&b'$') => i += 1,
            b'$' if b.get(i + 1) == Some(&b'{') => {
                depth += 1;
                i += 1;
            }
            b'}' if depth == 0 => return Some(i),
            b'}' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    None
}

/// The inside of `${…}`: a name, then optionally an operator and its word.
fn braced(
    inner: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Interpolated, InterpError> {
    let n = name_len(inner);
    if n == 0 {
        return Err(InterpError::Invalid(format!(
            "`${{{inner}}}` names no variable: a name is letters, digits and `_`, not starting with a digit"
        )));
    }
    let (name, op) = inner.split_at(n);
    let value = lookup(name);
    let set = value.is_some();
    let nonempty = value.as_deref().is_some_and(|v| !v.is_empty());
    let word = |w: &str| interpolate(w, lookup);
    let got = |v: Option<String>| Interpolated {
        text: v.unwrap_or_default(),
        substituted: true,
    };
    let r = if op.is_empty() {
        got(value)
    } else if let Some(w) = op.strip_prefix(":-") {
        if nonempty { got(value) } else { word(w)? }
    } else if let Some(w) = op.strip_prefix(":?") {
        if nonempty {
            got(value)
        } else {
            return Err(required(name, w));
        }
    } else if let Some(w) = op.strip_prefix(":+") {
        if nonempty { word(w)? } else { got(None) }
    } else if let Some(w) = op.strip_prefix('-') {
        if set { got(value) } else { word(w)? }
    } else if let Some(w) = op.strip_prefix('?') {
        if set {
            got(value)
        } else {
            return Err(required(name, w));
        }
    } else if let Some(w) = op.strip_prefix('+') {
        if set { word(w)? } else { got(None) }
    } else {
        return Err(InterpError::Invalid(format!(
            "`${{{inner}}}`: after the name compose takes `:-`, `-`, `:?`, `?`, `:+` or `+`"
        )));
    };
    Ok(Interpolated {
        substituted: true,
        ..r
    })
}

fn required(name: &str, message: &str) -> InterpError {
    InterpError::Required {
        name: name.to_owned(),
        message: message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "SET" => Some("v".into()),
            "EMPTY" => Some(String::new()),
            "USER" => Some("app".into()),
            _ => None,
        }
    }

    fn i(t: &str) -> String {
        interpolate(t, &env).unwrap().text
    }

    #[test]
    fn every_form_reads_as_compose_reads_it() {
        assert_eq!(i("$SET-${SET}"), "v-v");
        assert_eq!(i("${UNSET}|$UNSET|"), "||");
        assert_eq!(i("${UNSET:-d} ${EMPTY:-d} ${SET:-d}"), "d d v");
        assert_eq!(i("${UNSET-d} ${EMPTY-d} ${SET-d}"), "d  v");
        assert_eq!(i("${UNSET:+a} ${EMPTY:+a} ${SET:+a}"), "  a");
        assert_eq!(i("${UNSET+a} ${EMPTY+a} ${SET+a}"), " a a");
        assert_eq!(i("${SET:?no} ${EMPTY?no}"), "v ");
        assert_eq!(i("$$SET $${SET} a$$"), "$SET ${SET} a$");
        assert_eq!(i("$SET.x ${SET}x $SETx"), "v.x vx ");
    }

    #[test]
    fn nested_defaults_leave_no_stray_brace() {
        assert_eq!(i("${UNSET:-${USER}}"), "app");
        assert_eq!(i("${UNSET:-${ALSO_UNSET:-x}}"), "x");
        assert_eq!(i("${POSTGRES_DB:-${USER:-postgres}}-db"), "app-db");
        assert_eq!(i("${UNSET:-a}b}"), "ab}");
        assert_eq!(i("${UNSET:-$${x}}"), "${x}");
    }

    #[test]
    fn required_and_invalid_forms_are_errors() {
        assert_eq!(
            interpolate("${UNSET:?set it}", &env).unwrap_err(),
            InterpError::Required {
                name: "UNSET".into(),
                message: "set it".into()
            }
        );
        assert!(interpolate("${EMPTY:?x}", &env).is_err());
        assert!(interpolate("${UNSET?x}", &env).is_err());
        for bad in ["a $ b", "$", "${}", "${1X}", "${SET", "${SET:x}", "$-"] {
            assert!(
                matches!(interpolate(bad, &env), Err(InterpError::Invalid(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn substitution_is_marked_so_it_is_never_written() {
        assert!(!interpolate("postgres:16 $$x", &env).unwrap().substituted);
        assert!(interpolate("postgres:${SET}", &env).unwrap().substituted);
        assert!(interpolate("${UNSET:-16}", &env).unwrap().substituted);
    }
}
