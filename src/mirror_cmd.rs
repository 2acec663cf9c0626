//! `strait mirror --config FILE`: run the mirrors of a configuration (and
//! its admin listener) until SIGTERM or SIGINT.

use std::path::Path;

use anyhow::Context;
use strait_config::Config;
use tokio::sync::watch;

/// Loads `config`, starts its mirrors and serves `/metrics` on
/// `admin.listen` if set. On SIGTERM each mirror writes what it fetched,
/// commits, and the process exits.
pub fn run(path: &Path) -> anyhow::Result<()> {
    let config = Config::load(path)?;
    if config.mirrors.is_empty() {
        anyhow::bail!(
            "{}: mirrors: none configured, so `strait mirror` has nothing to run; \
             see config/examples/mirror.yaml",
            path.display()
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("strait-mirror")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let (stop, stopped) = watch::channel(false);
        let admin = crate::admin::Admin::new(false);
        strait_upstream::metrics::register(&admin.registry)?;
        let listener = crate::admin::start_configured(&config, &admin, &stopped).await?;
        let mut mirrors = crate::mirrors::start(&config, &admin, &stopped)?;
        tracing::info!(mirrors = config.mirrors.len(), "Strait is mirroring");
        crate::serve::shutdown_signal().await;
        stop.send_replace(true);
        while mirrors.join_next().await.is_some() {}
        if let Some(listener) = listener {
            let _ = listener.await;
        }
        Ok(())
    })
}

/// `strait mirror translate-offsets`'s arguments.
#[derive(Debug)]
pub struct Translate {
    /// The configuration file.
    pub config: std::path::PathBuf,
    /// The mirror's name.
    pub mirror: String,
    /// Regular expression of the groups.
    pub group: String,
    /// Commit the translations on the target.
    pub apply: bool,
    /// JSON rather than a table.
    pub json: bool,
    /// The groups' offsets on the target back to the source.
    pub back: bool,
}

/// Translates the committed offsets of the groups `args.group` selects on
/// the mirror's source, prints them and, with `--apply`, commits them on
/// the target. Fails (after printing every group) if a group could not be
/// applied.
pub fn translate_offsets(args: &Translate) -> anyhow::Result<()> {
    use strait_mirror::offset_map::Translation;
    use strait_mirror::translate::{Direction, Translator};

    let config = Config::load(&args.config)?;
    let Some(m) = config.mirrors.get(&args.mirror) else {
        let names: Vec<&String> = config.mirrors.keys().collect();
        anyhow::bail!(
            "{}: no mirror `{}` under mirrors: (it has {names:?})",
            args.config.display(),
            args.mirror
        );
    };
    let groups = regex::Regex::new(&format!("^(?:{})$", args.group))
        .with_context(|| format!("--group `{}` is not a regular expression", args.group))?;
    let filter = m.topic_filter();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let clusters = strait_gateway::launch::upstream_clusters(&config)?;
        let map_topic = m.offset_map_topic(&args.mirror);
        let translator = Translator::load(
            clusters[&m.source].clone(),
            clusters[&m.target].clone(),
            &m.group_id(&args.mirror),
            &map_topic,
        )
        .await?;
        let direction = if args.back {
            Direction::Back
        } else {
            Direction::Forward
        };
        let names = translator.groups(direction, |g| groups.is_match(g)).await?;
        let mut out = Vec::new();
        let mut failed = Vec::new();
        for group in &names {
            let rows = translator
                .translate_group(group, direction, |t| filter.matches(t), |t| m.target_topic(t))
                .await?;
            let applied = if args.apply {
                match translator.apply(group, &rows, direction).await {
                    Ok(n) => Ok(n),
                    Err(e) => {
                        failed.push(group.clone());
                        Err(e.to_string())
                    }
                }
            } else {
                Ok(0)
            };
            out.push((group.clone(), rows, applied));
        }
        let map = translator.map();
        if args.json {
            let json = serde_json::json!({
                "mirror": args.mirror,
                "map": {
                    "topic": map_topic,
                    "entries": map.entries,
                    "bytes": map.bytes,
                    "partitions": map.partitions.len(),
                    "segments": map.partitions.values().map(|p| p.segments().len()).sum::<usize>(),
                },
                "groups": out.iter().map(|(group, rows, applied)| serde_json::json!({
                    "group": group,
                    "applied": args.apply.then(|| applied.as_ref().is_ok()),
                    "error": applied.as_ref().err(),
                    "partitions": rows.iter().map(|r| {
                        let (kind, mirrored_to) = match r.translation {
                            Translation::Exact(_) => ("exact", None),
                            Translation::BeforeMap(_) => ("before_map", None),
                            Translation::Ahead(at) => ("ahead", Some(at)),
                            Translation::Unknown => ("unknown", None),
                        };
                        serde_json::json!({
                            "topic": r.topic,
                            "partition": r.partition,
                            "offset": r.offset,
                            "to_topic": r.to_topic,
                            "to_offset": r.translation.target(),
                            "translation": kind,
                            "mirrored_to": mirrored_to,
                        })
                    }).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            });
            println!("{json}");
        } else {
            let (from, to) = if args.back {
                ("target", "source")
            } else {
                ("source", "target")
            };
            println!(
                "{:<24} {:<24} {:>9} {:>14} {:<24} {:>14}  NOTE",
                "GROUP", "TOPIC", "PARTITION", "OFFSET", "TO-TOPIC", "TO-OFFSET"
            );
            for (group, rows, applied) in &out {
                for r in rows {
                    let note = match r.translation {
                        Translation::Exact(_) => String::new(),
                        Translation::BeforeMap(_) => {
                            "before the map: earlier records were never mirrored (or the map expired them)"
                                .to_owned()
                        }
                        Translation::Ahead(at) => format!("not mirrored yet: the mirror is at {at}"),
                        Translation::Unknown => {
                            "no map of this partition: the mirror has not copied it".to_owned()
                        }
                    };
                    println!(
                        "{:<24} {:<24} {:>9} {:>14} {:<24} {:>14}  {note}",
                        group,
                        r.topic,
                        r.partition,
                        r.offset,
                        r.to_topic,
                        r.translation.target().map_or("-".to_owned(), |t| t.to_string()),
                    );
                }
                match applied {
                    Ok(n) if args.apply => println!("{group}: committed {n} offsets on the {to}"),
                    Ok(_) => {}
                    Err(e) => println!("{group}: not applied: {e}"),
                }
            }
            if names.is_empty() {
                println!("no group on the {from} matches `{}`", args.group);
            }
        }
        if !failed.is_empty() {
            anyhow::bail!("not applied for {}: see above", failed.join(", "));
        }
        Ok(())
    })
}
