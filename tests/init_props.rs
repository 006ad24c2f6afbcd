//! Properties of `binky init` over generated compose projects: no value
//! from `.env`, an `env_file` or `environment:` ever reaches the output,
//! and the output always passes `binky check`.

use proptest::prelude::*;

/// Images init maps (servers), leaves out (tools), or treats as apps.
const IMAGES: &[&str] = &[
    "postgres:16",
    "bitnami/redis:7",
    "mysql:8",
    "rabbitmq:3-management",
    "confluentinc/cp-kafka:7.6.1",
    "qdrant/qdrant",
    "dpage/pgadmin4",
    "acme/app:1.0",
    "registry.example.com/team/api:${TAG}",
];

#[derive(Debug, Clone)]
struct Svc {
    image: usize,
    build: bool,
    list_form: bool,
    /// (key, value kind): 0 plain secret, 1 URL naming another service with
    /// the secret as password and path, 2 `${VAR}` from .env.
    env: Vec<(String, u8, usize)>,
    env_file: bool,
    port: Option<u16>,
}

fn svc() -> impl Strategy<Value = Svc> {
    (
        0..IMAGES.len(),
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(("[A-Z][A-Z_]{0,8}", 0u8..3, 0usize..4), 0..4),
        any::<bool>(),
        prop::option::of(1024u16..60000),
    )
        .prop_map(|(image, build, list_form, env, env_file, port)| Svc {
            image,
            build,
            list_form,
            env,
            env_file,
            port,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn no_value_is_copied_and_check_passes(
        services in prop::collection::vec(svc(), 1..5),
        secrets in prop::collection::vec("[a-zA-Z0-9]{12,20}", 8),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let names: Vec<String> = (0..services.len()).map(|i| format!("s{i}")).collect();
        let mut yaml = String::from("services:\n");
        let mut dotenv = String::new();
        for (i, s) in services.iter().enumerate() {
            yaml.push_str(&format!("  {}:\n", names[i]));
            if s.build {
                yaml.push_str("    build: .\n");
            }
            yaml.push_str(&format!("    image: \"{}\"\n", IMAGES[s.image]));
            if let Some(p) = s.port {
                yaml.push_str(&format!("    ports: [\"{p}:{p}\"]\n"));
            }
            if s.env_file {
                let f = format!("{}.env", names[i]);
                std::fs::write(dir.join(&f), format!("FROM_FILE={}\n", secrets[i % 8])).unwrap();
                yaml.push_str(&format!("    env_file: {f}\n"));
            }
            if !s.env.is_empty() {
                yaml.push_str("    environment:\n");
            }
            for (j, (key, kind, other)) in s.env.iter().enumerate() {
                let secret = &secrets[(i + j) % 8];
                let target = &names[other % names.len()];
                let value = match kind {
                    0 => secret.clone(),
                    1 => format!("postgres://user:{secret}@{target}:5432/{secret}"),
                    _ => {
                        dotenv.push_str(&format!("V{i}_{j}={secret}\n"));
                        format!("${{V{i}_{j}}}")
                    }
                };
                if s.list_form {
                    yaml.push_str(&format!("      - {key}{j}={value}\n"));
                } else {
                    yaml.push_str(&format!("      {key}{j}: \"{value}\"\n"));
                }
            }
        }
        dotenv.push_str(&format!("TAG={}\n", secrets[7]));
        std::fs::write(dir.join("compose.yaml"), &yaml).unwrap();
        std::fs::write(dir.join(".env"), &dotenv).unwrap();
        let made = binky::init::generate(dir, None, &|_| None).unwrap();
        for s in &secrets {
            prop_assert!(!made.toml.contains(s.as_str()), "{s} copied from\n{yaml}\n{dotenv}\ninto\n{}", made.toml);
        }
        let report = binky::config::check_str(&made.toml, &dir.join("binky.toml"));
        prop_assert_eq!(report.errors(), 0, "{}", made.toml);
    }
}
