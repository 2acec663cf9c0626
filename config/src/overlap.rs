//! What `strait check` proves about topic names: a mirror's `rename`
//! template, and whether two mirrors can write the same target topic (or a
//! mirror within one cluster can select a topic it writes itself).
//!
//! A mirror maps each source topic `t` that its filter selects to
//! `template(t)`. Two such maps meet when some `t` of the first and some `u`
//! of the second give the same name. [`overlap`] answers that question
//! exactly where it can and says so when it cannot:
//!
//! 1. Templates `P{topic}…S` and `P'{topic}…S'` can only give the same name
//!    if one of `P`, `P'` begins the other and one of `S`, `S'` ends the
//!    other. When they cannot, the topic sets do not matter.
//! 2. When either filter's `topics` regex denotes a finite set of names
//!    (`orders|payments`, `audit\.(eu|us)`), each of its names is renamed,
//!    and the other template is inverted to see whether the other mirror
//!    selects the one source topic that would give the same name.
//! 3. When both templates hold `{topic}` once, the names each mirror can
//!    write are its prefix, a topic that `topics` matches and `exclude` does
//!    not, and its suffix: the two mirrors' prefixes, suffixes and automata
//!    (two `topics`, two `exclude`) are run side by side over the characters
//!    of topic names, searching for a name both can write. The search gives
//!    up beyond [`MAX_STATES`] states.
//! 4. Otherwise the answer is [`Overlap::Unknown`].
//!
//! Names longer than Kafka's 249 characters are not excluded: that only
//! makes the answer more cautious.

use std::collections::hash_map::{Entry, HashMap};
use std::collections::{BTreeSet, VecDeque};

use regex_automata::dfa::{dense, Automaton, StartKind};
use regex_automata::util::primitives::StateID;
use regex_automata::util::start;
use regex_automata::{Anchored, MatchKind};
use regex_syntax::hir::{Class, Hir, HirKind, Look};

use crate::pattern::{group, TopicFilter};
use crate::spool::check_topic_name;

/// What `rename` replaces with the source topic's name.
pub(crate) const PLACEHOLDER: &str = "{topic}";

/// Longest topic name Kafka accepts.
const MAX_TOPIC_LEN: usize = 249;

/// Most names a `topics` regex may denote to be treated as a finite list.
const MAX_NAMES: usize = 4096;

/// Most product states the automata search visits before giving up.
pub(crate) const MAX_STATES: usize = 100_000;

/// Largest automaton built for the search, in bytes.
const MAX_DFA_BYTES: usize = 8 << 20;

/// The characters of a topic name, the alphabet of the search.
const TOPIC_BYTES: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";

/// A parsed `rename`: the literal text between the `{topic}`s, so that
/// `parts` has one element more than there are `{topic}`s (at least two).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template<'a> {
    parts: Vec<&'a str>,
}

impl<'a> Template<'a> {
    /// Parses `rename`. The text around the `{topic}`s must be made of
    /// topic name characters, and there must be at least one `{topic}`.
    /// `example` is a prefix the messages suggest (the source cluster's
    /// name).
    pub(crate) fn parse(rename: &'a str, example: &str) -> Result<Template<'a>, String> {
        let parts: Vec<&str> = rename.split(PLACEHOLDER).collect();
        for part in &parts {
            if let Some(open) = part.find('{') {
                let placeholder = match part[open..].find('}') {
                    Some(close) => &part[open..=open + close],
                    None => &part[open..],
                };
                return Err(format!(
                    "`{rename}` holds `{placeholder}`, which is not a placeholder: only `{{topic}}` \
                     is replaced (by the source topic's name)"
                ));
            }
            if part.contains('}') {
                return Err(format!(
                    "`{rename}` holds a `}}` outside `{{topic}}`; topic names cannot contain braces"
                ));
            }
            if let Some(bad) = part
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
            {
                return Err(format!(
                    "`{rename}` holds {bad:?}; a topic name has only ASCII letters, digits, `.`, \
                     `_` and `-`"
                ));
            }
        }
        if rename.is_empty() {
            return Err(format!(
                "must not be empty: write a template such as `{example}.{{topic}}`, or leave it out \
                 to keep the source topics' names"
            ));
        }
        if parts.len() < 2 {
            return Err(format!(
                "`{rename}` has no `{{topic}}`, so every source topic would be written to the one \
                 topic `{rename}`; write a template such as `{example}.{{topic}}`"
            ));
        }
        let fixed: usize = parts.iter().map(|p| p.len()).sum();
        if fixed + (parts.len() - 1) > MAX_TOPIC_LEN {
            return Err(format!(
                "`{rename}` leaves no room for the topic's name: a topic name has at most \
                 {MAX_TOPIC_LEN} characters"
            ));
        }
        Ok(Template { parts })
    }

    /// The target name of `topic`.
    pub(crate) fn apply(&self, topic: &str) -> String {
        self.parts.join(topic)
    }

    /// Whether the template is `{topic}`: every name stays as it is.
    pub(crate) fn is_identity(&self) -> bool {
        self.parts == ["", ""]
    }

    /// The text before the first `{topic}`.
    pub(crate) fn prefix(&self) -> &'a str {
        self.parts[0]
    }

    /// The text after the last `{topic}`.
    pub(crate) fn suffix(&self) -> &'a str {
        self.parts[self.parts.len() - 1]
    }

    /// How many times `{topic}` appears.
    fn occurrences(&self) -> usize {
        self.parts.len() - 1
    }

    /// The one non-empty topic whose name this template turns into `name`,
    /// if there is one (a template is injective: the length of `name`
    /// fixes the length of the topic, and the first `{topic}` its text).
    pub(crate) fn invert(&self, name: &str) -> Option<String> {
        let fixed: usize = self.parts.iter().map(|p| p.len()).sum();
        let rest = name.len().checked_sub(fixed)?;
        let k = self.occurrences();
        if rest == 0 || rest % k != 0 {
            return None;
        }
        let start = self.prefix().len();
        let topic = name.get(start..start + rest / k)?;
        (self.apply(topic) == name).then(|| topic.to_owned())
    }

    /// Whether this template and `other` can give the same name to some
    /// topics: only if one prefix begins the other and one suffix ends
    /// the other.
    pub(crate) fn may_meet(&self, other: &Template<'_>) -> bool {
        let (p, q) = (self.prefix(), other.prefix());
        let (s, u) = (self.suffix(), other.suffix());
        (p.starts_with(q) || q.starts_with(p)) && (s.ends_with(u) || u.ends_with(s))
    }
}

/// One mirror's map from source topics to target names, as [`overlap`]
/// sees it. The regexes are valid.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NameMap<'a> {
    /// The `topics` regex, as written.
    pub(crate) include: &'a str,
    /// The `exclude` regex, as written.
    pub(crate) exclude: &'a str,
    /// The two compiled.
    pub(crate) filter: &'a TopicFilter,
    /// The `rename` template.
    pub(crate) template: &'a Template<'a>,
}

/// Whether two [`NameMap`]s can give the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Overlap {
    /// No name comes out of both.
    Disjoint,
    /// Source topic `a` of the first and `b` of the second both become
    /// `target`.
    Example {
        /// The name both give.
        target: String,
        /// The first map's source topic.
        a: String,
        /// The second map's source topic.
        b: String,
    },
    /// Could not tell, for the reason given (a phrase for a message).
    Unknown(String),
}

/// Whether some topic selected by `a` and some topic selected by `b` get
/// the same name. See the module documentation for how.
pub(crate) fn overlap(a: NameMap<'_>, b: NameMap<'_>) -> Overlap {
    if !a.template.may_meet(b.template) {
        return Overlap::Disjoint;
    }
    for (first, second, swapped) in [(a, b, false), (b, a, true)] {
        let Some(names) = finite_names(first.include) else {
            continue;
        };
        for topic in names {
            if check_topic_name(&topic).is_err() || !first.filter.matches(&topic) {
                continue;
            }
            let target = first.template.apply(&topic);
            let Some(other) = second.template.invert(&target) else {
                continue;
            };
            if check_topic_name(&other).is_ok() && second.filter.matches(&other) {
                let (a, b) = if swapped { (other, topic) } else { (topic, other) };
                return Overlap::Example { target, a, b };
            }
        }
        return Overlap::Disjoint;
    }
    if a.template.occurrences() == 1 && b.template.occurrences() == 1 {
        return search(a, b);
    }
    Overlap::Unknown("neither `topics` is a finite list of names, and a rename repeats `{topic}`".to_owned())
}

/// The names `pattern` matches in full, when they are a finite set of at
/// most [`MAX_NAMES`]; `None` when they are not, or when the regex uses
/// look-around other than `^` and `$`.
pub(crate) fn finite_names(pattern: &str) -> Option<BTreeSet<String>> {
    let hir = regex_syntax::Parser::new().parse(pattern).ok()?;
    let mut names = BTreeSet::new();
    for tokens in expand(&hir)? {
        // `^` only holds before every byte, `$` only after every byte.
        let first_byte = tokens.iter().position(|t| matches!(t, Token::Byte(_)));
        let last_byte = tokens.iter().rposition(|t| matches!(t, Token::Byte(_)));
        let anchors_hold = tokens.iter().enumerate().all(|(i, t)| match t {
            Token::Start => first_byte.is_none_or(|first| i < first),
            Token::End => last_byte.is_none_or(|last| i > last),
            Token::Byte(_) => true,
        });
        if !anchors_hold {
            continue;
        }
        let bytes: Vec<u8> = tokens
            .iter()
            .filter_map(|t| match t {
                Token::Byte(b) => Some(*b),
                _ => None,
            })
            .collect();
        if let Ok(name) = String::from_utf8(bytes) {
            names.insert(name);
        }
    }
    Some(names)
}

/// One step of a string a finite regex matches: a byte, or an anchor whose
/// position is checked once the whole string is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Byte(u8),
    Start,
    End,
}

/// Every token string `hir` matches, or `None` when there are infinitely
/// many or more than [`MAX_NAMES`].
fn expand(hir: &Hir) -> Option<Vec<Vec<Token>>> {
    match hir.kind() {
        HirKind::Empty => Some(vec![Vec::new()]),
        HirKind::Literal(literal) => Some(vec![literal.0.iter().map(|&b| Token::Byte(b)).collect()]),
        HirKind::Class(Class::Unicode(class)) => {
            let count: usize = class
                .ranges()
                .iter()
                .map(|r| (u32::from(r.end()) - u32::from(r.start())) as usize + 1)
                .sum();
            if count > MAX_NAMES {
                return None;
            }
            let mut out = Vec::with_capacity(count);
            for range in class.ranges() {
                for c in range.start()..=range.end() {
                    let mut buf = [0; 4];
                    out.push(c.encode_utf8(&mut buf).bytes().map(Token::Byte).collect());
                }
            }
            Some(out)
        }
        HirKind::Class(Class::Bytes(class)) => Some(
            class
                .ranges()
                .iter()
                .flat_map(|r| r.start()..=r.end())
                .map(|b| vec![Token::Byte(b)])
                .collect(),
        ),
        HirKind::Look(look) => match look {
            Look::Start | Look::StartLF | Look::StartCRLF => Some(vec![vec![Token::Start]]),
            Look::End | Look::EndLF | Look::EndCRLF => Some(vec![vec![Token::End]]),
            _ => None,
        },
        HirKind::Repetition(repetition) => {
            let max = repetition.max?;
            if max as usize > MAX_NAMES {
                return None;
            }
            let sub = expand(&repetition.sub)?;
            let mut out = Vec::new();
            let mut power = vec![Vec::new()];
            for n in 0..=max {
                if n >= repetition.min {
                    out.extend(power.iter().cloned());
                    if out.len() > MAX_NAMES {
                        return None;
                    }
                }
                if n < max {
                    power = concat(&power, &sub)?;
                }
            }
            Some(out)
        }
        HirKind::Capture(capture) => expand(&capture.sub),
        HirKind::Concat(subs) => subs
            .iter()
            .try_fold(vec![Vec::new()], |acc, sub| concat(&acc, &expand(sub)?)),
        HirKind::Alternation(subs) => {
            let mut out = Vec::new();
            for sub in subs {
                out.extend(expand(sub)?);
                if out.len() > MAX_NAMES {
                    return None;
                }
            }
            Some(out)
        }
    }
}

/// Every `x` of `left` followed by every `y` of `right`, or `None` beyond
/// [`MAX_NAMES`].
fn concat(left: &[Vec<Token>], right: &[Vec<Token>]) -> Option<Vec<Vec<Token>>> {
    if left.len().saturating_mul(right.len()) > MAX_NAMES {
        return None;
    }
    let mut out = Vec::with_capacity(left.len() * right.len());
    for x in left {
        for y in right {
            out.push(x.iter().chain(y).copied().collect());
        }
    }
    Some(out)
}

/// Step 3 of [`overlap`], for templates with one `{topic}` each: a
/// breadth-first search for a name both maps can write, over the topic
/// name characters. Each map reads the name as its prefix, then a topic of
/// at least one character (fed to the automata of its `topics` and
/// `exclude`, anchored on the topic alone, so `^` and `\b` in them mean the
/// topic's start), then its suffix. Where the topic ends is not known in
/// advance, so a map can be in several phases at once; the search follows
/// every pair. Breadth-first, so the example found is a shortest one.
fn search(a: NameMap<'_>, b: NameMap<'_>) -> Overlap {
    let sides = match (Side::new(a), Side::new(b)) {
        (Ok(a), Ok(b)) => [a, b],
        (Err(why), _) | (_, Err(why)) => return Overlap::Unknown(why),
    };
    let gave_up = || Overlap::Unknown(format!("the comparison gave up after {MAX_STATES} states"));
    type Key = [Phase; 2];
    let root: Key = [Phase::Prefix(0); 2];
    let mut parents: HashMap<Key, Option<(Key, u8)>> = HashMap::from([(root, None)]);
    let mut queue = VecDeque::from([root]);
    let (mut next_a, mut next_b) = (Vec::with_capacity(2), Vec::with_capacity(2));
    while let Some(key) = queue.pop_front() {
        if sides[0].accepts(key[0]) && sides[1].accepts(key[1]) {
            let mut bytes = Vec::new();
            let mut at = key;
            while let Some((parent, byte)) = parents[&at] {
                bytes.push(byte);
                at = parent;
            }
            bytes.reverse();
            let target = String::from_utf8(bytes).expect("topic bytes are ASCII");
            let sources = a.template.invert(&target).zip(b.template.invert(&target));
            return match sources {
                // `.` and `..` are no topics: the search does not look past
                // them to a longer example, so it cannot say.
                Some((x, y)) if check_topic_name(&x).is_ok() && check_topic_name(&y).is_ok() => {
                    Overlap::Example { target, a: x, b: y }
                }
                _ => Overlap::Unknown(format!("the comparison stopped at the name `{target}`")),
            };
        }
        for &byte in TOPIC_BYTES {
            next_a.clear();
            next_b.clear();
            if sides[0].step(key[0], byte, &mut next_a).is_err()
                || sides[1].step(key[1], byte, &mut next_b).is_err()
            {
                return Overlap::Unknown("their regexes cannot be compared".to_owned());
            }
            for &x in &next_a {
                for &y in &next_b {
                    if let Entry::Vacant(entry) = parents.entry([x, y]) {
                        entry.insert(Some((key, byte)));
                        queue.push_back([x, y]);
                    }
                }
            }
        }
        if parents.len() > MAX_STATES {
            return gave_up();
        }
    }
    Overlap::Disjoint
}

/// Where one map is in reading a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Phase {
    /// Read this many bytes of the rename's prefix (all of them: the topic
    /// is next).
    Prefix(usize),
    /// In the topic, with the states of the `topics` and `exclude`
    /// automata.
    Topic(StateID, StateID),
    /// Read this many bytes of the suffix; the automata stopped where the
    /// topic ended.
    Suffix(usize, StateID, StateID),
}

/// One map, ready for [`search`]: its prefix and suffix, and the automata
/// of its `topics` and `exclude` (whole-name matches, anchored).
struct Side<'a> {
    prefix: &'a [u8],
    suffix: &'a [u8],
    include: dense::DFA<Vec<u32>>,
    exclude: dense::DFA<Vec<u32>>,
    starts: (StateID, StateID),
}

impl<'a> Side<'a> {
    fn new(map: NameMap<'a>) -> Result<Side<'a>, String> {
        let build = |pattern: &str| {
            dense::Builder::new()
                .configure(
                    dense::Config::new()
                        .match_kind(MatchKind::All)
                        .start_kind(StartKind::Anchored)
                        // Quits only on non-ASCII bytes, which the search
                        // never feeds.
                        .unicode_word_boundary(true)
                        .dfa_size_limit(Some(MAX_DFA_BYTES))
                        .determinize_size_limit(Some(MAX_DFA_BYTES)),
                )
                .build(&format!("^{}$", group(pattern)))
                .map_err(|error| format!("their regexes cannot be compared: {error}"))
        };
        let (include, exclude) = (build(map.include)?, build(map.exclude)?);
        let anchored = start::Config::new().anchored(Anchored::Yes);
        let start = |dfa: &dense::DFA<Vec<u32>>| {
            dfa.start_state(&anchored)
                .map_err(|error| format!("their regexes cannot be compared: {error}"))
        };
        let starts = (start(&include)?, start(&exclude)?);
        Ok(Side {
            prefix: map.template.prefix().as_bytes(),
            suffix: map.template.suffix().as_bytes(),
            include,
            exclude,
            starts,
        })
    }

    /// Pushes onto `out` the phases after reading `byte` in `phase`: at
    /// most two, as a topic byte can also be the suffix's first. `Err` if
    /// an automaton quits (it cannot on topic name characters).
    fn step(&self, phase: Phase, byte: u8, out: &mut Vec<Phase>) -> Result<(), ()> {
        match phase {
            Phase::Prefix(i) if i < self.prefix.len() => {
                if self.prefix[i] == byte {
                    out.push(Phase::Prefix(i + 1));
                }
            }
            Phase::Prefix(_) => self.topic(self.starts, byte, out)?,
            Phase::Topic(include, exclude) => {
                self.topic((include, exclude), byte, out)?;
                if self.suffix.first() == Some(&byte) {
                    out.push(Phase::Suffix(1, include, exclude));
                }
            }
            Phase::Suffix(j, include, exclude) => {
                if self.suffix.get(j) == Some(&byte) {
                    out.push(Phase::Suffix(j + 1, include, exclude));
                }
            }
        }
        Ok(())
    }

    /// The topic phase after `byte`, unless `topics` can no longer match.
    fn topic(
        &self,
        (include, exclude): (StateID, StateID),
        byte: u8,
        out: &mut Vec<Phase>,
    ) -> Result<(), ()> {
        let include = self.include.next_state(include, byte);
        let exclude = self.exclude.next_state(exclude, byte);
        if self.include.is_quit_state(include) || self.exclude.is_quit_state(exclude) {
            return Err(());
        }
        if !self.include.is_dead_state(include) {
            out.push(Phase::Topic(include, exclude));
        }
        Ok(())
    }

    /// Whether the name read so far is one this map writes: the suffix is
    /// complete, and the topic matched `topics` and not `exclude`.
    fn accepts(&self, phase: Phase) -> bool {
        let (include, exclude) = match phase {
            Phase::Topic(include, exclude) if self.suffix.is_empty() => (include, exclude),
            Phase::Suffix(j, include, exclude) if j == self.suffix.len() => (include, exclude),
            _ => return false,
        };
        let matches = |dfa: &dense::DFA<Vec<u32>>, state| dfa.is_match_state(dfa.next_eoi_state(state));
        matches(&self.include, include) && !matches(&self.exclude, exclude)
    }
}
