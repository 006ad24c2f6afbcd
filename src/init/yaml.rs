//! A compose file's YAML as a small tree of our own, each node with its
//! line: loaded by `saphyr` (YAML 1.2, aliases expanded under a node
//! budget, duplicate keys refused), then merge keys (`<<: *a`,
//! `<<: [*a, *b]`) applied as YAML 1.1 and compose apply them, since a
//! YAML 1.2 loader leaves `<<` as an ordinary key.

use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};

/// One node: its value and the line (1-based) it starts on.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// What it holds.
    pub value: Value,
    /// Where it starts, 1-based.
    pub line: usize,
    /// Compose's merge tags (`!reset`, `!override`), which say how an
    /// override file's value meets the base's.
    pub tag: Option<MergeTag>,
}

/// Compose's tags for merging files: `!reset` removes the base's value,
/// `!override` replaces it whole instead of merging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeTag {
    /// `!reset`
    Reset,
    /// `!override`
    Override,
}

/// A node's value. Scalars keep YAML's types, since compose reads
/// `5432` and `"5432"` alike but `true` in `environment` as the text `true`.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `~`, `null` or nothing.
    Null,
    /// `true`/`false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float, as the text YAML would print.
    Float(f64),
    /// Text.
    Str(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping with text keys, in the file's order.
    Map(Vec<(String, Node)>),
}

/// A YAML file the loader refused, with where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
    /// Why, for code that words it (never read from `message`).
    pub kind: YamlErrorKind,
}

/// Why a YAML file was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YamlErrorKind {
    /// Not YAML, or a shape compose does not take.
    Invalid,
    /// Its aliases expand past the loader's node budget (a "billion
    /// laughs" file): well-formed, but too large to read.
    TooLarge,
}

impl Node {
    /// A text node (made by merges and interpolation).
    pub fn text(s: impl Into<String>, line: usize) -> Node {
        Node {
            value: Value::Str(s.into()),
            line,
            tag: None,
        }
    }

    /// The mapping's entries, or `None` for any other kind.
    pub fn as_map(&self) -> Option<&[(String, Node)]> {
        match &self.value {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }

    /// The sequence's items, or `None` for any other kind.
    pub fn as_seq(&self) -> Option<&[Node]> {
        match &self.value {
            Value::Seq(s) => Some(s),
            _ => None,
        }
    }

    /// A scalar as compose reads it in text positions (`8080` is `"8080"`,
    /// `true` is `"true"`); `None` for null, a sequence or a mapping.
    pub fn scalar_text(&self) -> Option<String> {
        match &self.value {
            Value::Str(s) => Some(s.clone()),
            Value::Int(i) => Some(i.to_string()),
            Value::Float(f) => Some(f.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            Value::Null | Value::Seq(_) | Value::Map(_) => None,
        }
    }

    /// The value at `key` of a mapping.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.as_map()?
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// What kind of node this is, for messages ("a list", "a mapping").
    pub fn kind(&self) -> &'static str {
        match self.value {
            Value::Null => "empty",
            Value::Bool(_) => "a boolean",
            Value::Int(_) | Value::Float(_) => "a number",
            Value::Str(_) => "text",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

/// Loads the first document of `text`. An empty file is a null node.
///
/// # Errors
/// The loader's own words with the line: invalid YAML, an unknown alias,
/// a duplicate key, alias expansion past the loader's budget (a "billion
/// laughs" file), a key that is not text, a merge key whose value is not
/// a mapping or a list of mappings.
pub fn load(text: &str) -> Result<Node, YamlError> {
    let mut docs = load_all(text)?;
    Ok(if docs.is_empty() {
        Node {
            value: Value::Null,
            line: 1,
            tag: None,
        }
    } else {
        docs.swap_remove(0)
    })
}

/// Every document of `text` (`---` between them), in order.
///
/// A file the loader refuses is tried once more with its multi-line flow
/// collections re-indented as compose's loader reads them (see
/// `init::flow`): a closing `]` at its key's indentation, tabs inside a
/// flow. Only leading whitespace inside flow collections moves, so no
/// value changes and lines keep their numbers; when that fails too, the
/// error is the loader's on the file as written.
///
/// # Errors
/// As [`load`].
pub fn load_all(text: &str) -> Result<Vec<Node>, YamlError> {
    match MarkedYaml::load_from_str(text) {
        Ok(docs) => convert_all(&docs),
        Err(e) => {
            if let std::borrow::Cow::Owned(relaxed) = super::flow::relax(text)
                && let Ok(docs) = MarkedYaml::load_from_str(&relaxed)
            {
                return convert_all(&docs);
            }
            // saphyr reports an exhausted alias budget as a scan error
            // with no kind of its own: its words are read here, once, and
            // nowhere else.
            let kind = if e.info().contains("alias expansion exceeded") {
                YamlErrorKind::TooLarge
            } else {
                YamlErrorKind::Invalid
            };
            Err(YamlError {
                kind,
                line: Some(e.marker().line()),
                message: e.info().to_owned(),
            })
        }
    }
}

/// Each loaded document as a [`Node`].
fn convert_all(docs: &[MarkedYaml<'_>]) -> Result<Vec<Node>, YamlError> {
    docs.iter().map(|d| convert(d, 0)).collect()
}

/// Nesting deeper than this is refused: no compose file needs it, and the
/// conversion recurses.
const MAX_DEPTH: usize = 64;

fn convert(y: &MarkedYaml<'_>, depth: usize) -> Result<Node, YamlError> {
    let line = y.span.start.line().max(1);
    if depth > MAX_DEPTH {
        return Err(YamlError {
            kind: YamlErrorKind::Invalid,
            line: Some(line),
            message: format!("nested more than {MAX_DEPTH} levels deep"),
        });
    }
    let value = match &y.data {
        YamlData::Value(s) => scalar(s),
        YamlData::Representation(text, _, _) => Value::Str(text.to_string()),
        YamlData::Sequence(items) => Value::Seq(
            items
                .iter()
                .map(|i| convert(i, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        YamlData::Mapping(map) => {
            let mut own = Vec::new();
            let mut merged: Vec<Node> = Vec::new();
            for (k, v) in map {
                let key = key_text(k)?;
                let v = convert(v, depth + 1)?;
                if key == "<<" {
                    merge_sources(v, &mut merged)?;
                } else {
                    own.push((key, v));
                }
            }
            // Keys written in the mapping win over merged ones; among
            // merged mappings the first listed wins.
            for m in merged {
                if let Value::Map(entries) = m.value {
                    for (k, v) in entries {
                        if !own.iter().any(|(o, _)| *o == k) {
                            own.push((k, v));
                        }
                    }
                }
            }
            Value::Map(own)
        }
        YamlData::Tagged(tag, inner) => {
            let mut n = convert(inner, depth + 1)?;
            n.tag = match tag.suffix.as_str() {
                "reset" => Some(MergeTag::Reset),
                "override" => Some(MergeTag::Override),
                _ => None,
            };
            return Ok(n);
        }
        YamlData::Alias(_) | YamlData::BadValue => Value::Null,
    };
    Ok(Node {
        value,
        line,
        tag: None,
    })
}

/// The sources of a merge key: one mapping, or a list of mappings.
fn merge_sources(v: Node, into: &mut Vec<Node>) -> Result<(), YamlError> {
    let line = v.line;
    match v.value {
        Value::Map(_) => into.push(v),
        Value::Seq(items) => {
            for i in items {
                if i.as_map().is_none() {
                    return Err(YamlError {
                        kind: YamlErrorKind::Invalid,
                        line: Some(i.line),
                        message: format!(
                            "a merge key (`<<`) takes mappings, and this item is {}",
                            i.kind()
                        ),
                    });
                }
                into.push(i);
            }
        }
        _ => {
            return Err(YamlError {
                kind: YamlErrorKind::Invalid,
                line: Some(line),
                message: format!(
                    "a merge key (`<<`) takes a mapping or a list of mappings, not {}",
                    v.kind()
                ),
            });
        }
    }
    Ok(())
}

fn scalar(s: &Scalar<'_>) -> Value {
    match s {
        Scalar::Null => Value::Null,
        Scalar::Boolean(b) => Value::Bool(*b),
        Scalar::Integer(i) => Value::Int(*i),
        Scalar::FloatingPoint(f) => Value::Float(f.into_inner()),
        Scalar::String(t) => Value::Str(t.to_string()),
    }
}

/// A mapping key as text: compose's keys are names, but YAML allows
/// `8080: x` and `true: x`, which read as their text.
fn key_text(k: &MarkedYaml<'_>) -> Result<String, YamlError> {
    match &k.data {
        YamlData::Value(s) => Ok(match s {
            Scalar::Null => "null".to_owned(),
            Scalar::Boolean(b) => b.to_string(),
            Scalar::Integer(i) => i.to_string(),
            Scalar::FloatingPoint(f) => f.to_string(),
            Scalar::String(t) => t.to_string(),
        }),
        YamlData::Representation(t, _, _) => Ok(t.to_string()),
        _ => Err(YamlError {
            kind: YamlErrorKind::Invalid,
            line: Some(k.span.start.line().max(1)),
            message: "a mapping key must be text, not a list or a mapping".to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map_keys(n: &Node) -> Vec<&str> {
        n.as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str())
            .collect()
    }

    /// Sentry's self-hosted compose file: a flow sequence closed at its
    /// key's indentation, with a comment inside. Compose reads it; so does
    /// `init`, with the values and lines the file has.
    #[test]
    fn a_flow_sequence_closed_at_its_keys_indentation_loads_as_compose_reads_it() {
        let text = "services:\n  seaweedfs:\n    healthcheck:\n      test: [\n          \"CMD-SHELL\",\n          # a comment inside the flow sequence\n          \"wget -q -O- http://seaweedfs:9340/healthz || exit 1\",\n      ]\n      interval: 10s\n";
        let doc = load(text).unwrap();
        let hc = doc
            .get("services")
            .unwrap()
            .get("seaweedfs")
            .unwrap()
            .get("healthcheck")
            .unwrap();
        let test: Vec<&str> = hc
            .get("test")
            .unwrap()
            .as_seq()
            .unwrap()
            .iter()
            .map(|n| match &n.value {
                Value::Str(s) => s.as_str(),
                v => panic!("{v:?}"),
            })
            .collect();
        assert_eq!(
            test,
            [
                "CMD-SHELL",
                "wget -q -O- http://seaweedfs:9340/healthz || exit 1"
            ]
        );
        assert_eq!(hc.get("interval").unwrap().value, Value::Str("10s".into()));
        assert_eq!(hc.get("interval").unwrap().line, 9);
        // What is wrong whichever way it is read keeps its own line.
        let broken = "services:\n  db:\n    environment: [\n  web:\n    build: .\n";
        assert_eq!(load(broken).unwrap_err().line, Some(4));
    }

    #[test]
    fn merge_keys_take_one_mapping_or_a_list_and_own_keys_win() {
        let n = load(
            "a: &a {x: 1, y: 1}\nb: &b {y: 2, z: 2}\nc:\n  <<: [*a, *b]\n  x: 3\nd:\n  <<: *b\n",
        )
        .unwrap();
        let c = n.get("c").unwrap();
        assert_eq!(map_keys(c), ["x", "y", "z"]);
        assert_eq!(c.get("x").unwrap().value, Value::Int(3));
        assert_eq!(
            c.get("y").unwrap().value,
            Value::Int(1),
            "first source wins"
        );
        assert_eq!(map_keys(n.get("d").unwrap()), ["y", "z"]);
    }

    #[test]
    fn errors_carry_the_line() {
        let e = load("services:\n  a: [\n  b: 1\n").unwrap_err();
        assert!(e.line.is_some(), "{e:?}");
        let e = load("a: 1\na: 2\n").unwrap_err();
        assert_eq!(e.line, Some(2), "{e:?}");
        assert!(e.message.contains("duplicate"), "{e:?}");
        let e = load("a: 1\nb:\n  <<: 3\n").unwrap_err();
        assert_eq!(e.line, Some(3), "{e:?}");
    }

    #[test]
    fn a_billion_laughs_is_refused_not_expanded() {
        let mut text = String::from("a: &a [x, x, x, x, x, x, x, x, x]\n");
        for (prev, name) in ["a", "b", "c", "d", "e", "f", "g", "h"]
            .iter()
            .zip(["b", "c", "d", "e", "f", "g", "h", "i"])
        {
            let refs = vec![format!("*{prev}"); 9].join(", ");
            text.push_str(&format!("{name}: &{name} [{refs}]\n"));
        }
        assert_eq!(load(&text).unwrap_err().kind, YamlErrorKind::TooLarge);
        assert_eq!(load("a: [").unwrap_err().kind, YamlErrorKind::Invalid);
    }

    #[test]
    fn merge_tags_are_kept() {
        let n = load("a: !reset []\nb: !override {x: 1}\n").unwrap();
        assert_eq!(n.get("a").unwrap().tag, Some(MergeTag::Reset));
        assert_eq!(n.get("b").unwrap().tag, Some(MergeTag::Override));
    }
}
