//! The tools' arguments, as their JSON schemas show them to a client.
//!
//! Every tool refuses an argument it does not know (`deny_unknown_fields`,
//! shown to clients as `additionalProperties: false`): a misspelt key —
//! `{"world": "feat-b"}` for `name` — is an error naming it, never ignored
//! so that the call acts on the default world instead.

use schemars::JsonSchema;
use serde::Deserialize;

/// Declares one tool's arguments: optionally the `name` and `project` that
/// pick a world, described by the `describe!` keys given, then the tool's
/// own fields. Every field may be left out (`serde(default)`) and any other
/// key is refused. serde's `flatten` would share the two fields too, but it
/// cannot be combined with `deny_unknown_fields`.
macro_rules! tool_args {
    (
        $(#[$doc:meta])*
        $ty:ident $(($name:ident, $project:ident))? {
            $($(#[$fdoc:meta])* $field:ident: $fty:ty,)*
        }
    ) => {
        $(#[$doc])*
        #[derive(Debug, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub(crate) struct $ty {
            $(
                #[doc = describe!($name)]
                #[serde(default)]
                pub name: Option<String>,
                #[doc = describe!($project)]
                #[serde(default)]
                pub project: Option<String>,
            )?
            $($(#[$fdoc])* #[serde(default)] pub $field: $fty,)*
        }
    };
}

/// What `name` and `project` say in each tool's schema, word for word as
/// clients already read it (the wording differs a little between tools).
macro_rules! describe {
    (branch) => {
        "The world's name: a git branch. Default: the world this server is bound to."
    };
    (new_branch) => {
        "The world's name: a git branch (created from HEAD if it does not exist). Default: the\nworld this server is bound to."
    };
    (world) => {
        "The world's name. Default: the world this server is bound to."
    };
    (known_project_or_here) => {
        "The project: its folder (or its binky.toml), or the name of a project the daemon knows.\nDefault: the folder `binky mcp` runs in."
    };
    (project_or_here) => {
        "The project: its folder (or its binky.toml), or a known project name. Default: the\nfolder `binky mcp` runs in."
    };
    (project) => {
        "The project: its folder (or its binky.toml), or a known project name."
    };
}

tool_args! {
    /// Arguments naming a world.
    WorldArgs(branch, known_project_or_here) {}
}

tool_args! {
    /// Arguments of `up`.
    UpArgs(new_branch, project_or_here) {
        /// Admission group this world belongs to (e.g. one per orchestrator).
        group: Option<String>,
        /// Wait while the world is queued for room (default true). `false`
        /// returns at once with state `queued` and its place; poll `status`.
        wait: Option<bool>,
        /// Put the world to sleep after this long without a request or CPU
        /// use (`"20m"`), instead of the project's `idle_after`; `"off"`
        /// never, `"default"` the project's. A request to one of its URLs
        /// (or `up`) wakes it.
        idle_after: Option<String>,
    }
}

tool_args! {
    /// Arguments of `remove`: no `force` — over MCP a worktree with work in
    /// it is never discarded, and an unknown argument is refused, not ignored.
    RemoveArgs(world, project_or_here) {}
}

tool_args! {
    /// Arguments of `reset`.
    ResetArgs(world, project_or_here) {
        /// The resource service whose slice to rebuild (e.g. `db`). Default:
        /// the world's only resource.
        service: Option<String>,
        /// Rebuild every slice of the world.
        all: bool,
    }
}

tool_args! {
    /// Arguments of `status`.
    StatusArgs {
        /// Only this project (a path inside it, or its name). Default: every project.
        project: Option<String>,
    }
}

tool_args! {
    /// Arguments of `verify`.
    VerifyArgs(world, project) {
        /// Run every check even after one fails.
        keep_going: bool,
        /// Run the world's own `[agents] verify` instead of the checks
        /// committed on the main checkout's branch; the record says so.
        from_branch: bool,
    }
}

tool_args! {
    /// Arguments of `logs`.
    LogsArgs(world, project) {
        /// Only this service's output.
        service: Option<String>,
        /// At most this many lines, the newest (default 100, at most 1000).
        lines: Option<usize>,
        /// The `cursor` of the previous answer: only lines printed since.
        cursor: Option<String>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn schema<T: JsonSchema>() -> Value {
        serde_json::to_value(schemars::schema_for!(T)).unwrap()
    }

    /// Every tool's schema refuses other keys, requires none (a bound
    /// server's world is the default), and has exactly its own fields.
    #[test]
    fn each_tool_lists_its_fields_and_refuses_others() {
        for (s, fields) in [
            (schema::<WorldArgs>(), &["name", "project"][..]),
            (
                schema::<UpArgs>(),
                &["group", "idle_after", "name", "project", "wait"],
            ),
            (schema::<RemoveArgs>(), &["name", "project"]),
            (
                schema::<ResetArgs>(),
                &["all", "name", "project", "service"],
            ),
            (schema::<StatusArgs>(), &["project"]),
            (
                schema::<VerifyArgs>(),
                &["from_branch", "keep_going", "name", "project"],
            ),
            (
                schema::<LogsArgs>(),
                &["cursor", "lines", "name", "project", "service"],
            ),
        ] {
            assert_eq!(s["additionalProperties"], false, "{s}");
            assert!(s["required"].is_null(), "{s}");
            let properties = s["properties"].as_object().unwrap();
            let mut keys: Vec<&str> = properties.keys().map(String::as_str).collect();
            keys.sort_unstable();
            assert_eq!(keys, fields, "{s}");
        }
        let name = &schema::<RemoveArgs>()["properties"]["name"];
        assert_eq!(
            name["description"],
            "The world's name. Default: the world this server is bound to."
        );
    }

    #[test]
    fn a_misspelt_key_is_refused() {
        let e = serde_json::from_value::<WorldArgs>(json!({"world": "feat-b"})).unwrap_err();
        assert!(e.to_string().contains("unknown field `world`"), "{e}");
        let e = serde_json::from_value::<RemoveArgs>(json!({"force": true})).unwrap_err();
        assert!(e.to_string().contains("unknown field `force`"), "{e}");
        let up: UpArgs = serde_json::from_value(json!({})).unwrap();
        assert!(up.name.is_none() && up.wait.is_none());
    }
}
