//! Sandbox image classes: which toolchain image a job's commands run in
//! (`image = "node"`) and on which Cloudflare Containers instance type
//! (`instance_type = "standard-1"`). Each allowed pair is one Containers
//! class in `wrangler.toml` with a Durable Object binding of its own; this
//! table is the one place the pairs are named (`tests/container_lifecycle.rs`
//! checks `wrangler.toml` against it).
//!
//! A sandbox's address says which pair it is: a run instance's id alone
//! for the default (`base` on its first instance type, as before image
//! classes existed), else the id, `~` and `<class>.<type>`. `~` is outside
//! the instance id alphabet, so the split is unambiguous. Under the agent
//! backend (no containers) the class only validates: the host's tools run.

/// One Containers instance type a class allows, and the binding of the
/// Durable Object class that runs it.
#[derive(Debug, PartialEq, Eq)]
pub struct InstanceType {
    pub name: &'static str,
    pub binding: &'static str,
}

/// An image class: its name and the instance types it allows, the first
/// being the default.
#[derive(Debug, PartialEq, Eq)]
pub struct ImageClass {
    pub name: &'static str,
    pub instance_types: &'static [InstanceType],
}

/// The class a job without `image` runs in: Debian with git.
pub const BASE: &str = "base";
/// The binding of `base` on its first type: the sandbox that existed
/// before image classes, whose addresses are bare instance ids.
pub const DEFAULT_BINDING: &str = "SANDBOX";

/// Every class, `base` first. Instance types are Cloudflare's: `lite`
/// (1/16 vCPU, 256 MiB) suffices for git and a shell; `basic` (1/4 vCPU,
/// 1 GiB) is what `npm ci` needs; a Rust build wants `standard-1` (1/2 vCPU,
/// 4 GiB) and may ask `standard-2` (1 vCPU, 6 GiB). Each pair costs a
/// Durable Object class in the Worker, so the list stays short.
pub const IMAGE_CLASSES: &[ImageClass] = &[
    ImageClass {
        name: BASE,
        instance_types: &[InstanceType {
            name: "lite",
            binding: DEFAULT_BINDING,
        }],
    },
    ImageClass {
        name: "node",
        instance_types: &[
            InstanceType {
                name: "basic",
                binding: "SANDBOX_NODE",
            },
            InstanceType {
                name: "standard-1",
                binding: "SANDBOX_NODE_STANDARD_1",
            },
        ],
    },
    ImageClass {
        name: "rust",
        instance_types: &[
            InstanceType {
                name: "standard-1",
                binding: "SANDBOX_RUST",
            },
            InstanceType {
                name: "standard-2",
                binding: "SANDBOX_RUST_STANDARD_2",
            },
        ],
    },
];

/// Separates a run instance's id from its sandbox's class in an address.
pub const ADDRESS_SEPARATOR: char = '~';

/// A job's image class and instance type, validated against the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selection {
    pub class: &'static ImageClass,
    pub instance_type: &'static InstanceType,
}

fn names<T>(items: &[T], name: impl Fn(&T) -> &str) -> String {
    items.iter().map(name).collect::<Vec<_>>().join(", ")
}

/// What `image` and `instance_type` select; unset: `base` and the class's
/// first type. The error names what exists, one sentence.
pub fn select(image: Option<&str>, instance_type: Option<&str>) -> Result<Selection, String> {
    let wanted = image.unwrap_or(BASE);
    let Some(class) = IMAGE_CLASSES.iter().find(|c| c.name == wanted) else {
        return Err(format!(
            "image {wanted:?} is no sandbox image class (classes: {})",
            names(IMAGE_CLASSES, |c| c.name)
        ));
    };
    let types = class.instance_types;
    let found = match instance_type {
        None => types.first(),
        Some(t) => types.iter().find(|i| i.name == t),
    };
    match found {
        Some(instance_type) => Ok(Selection {
            class,
            instance_type,
        }),
        None => Err(format!(
            "instance_type {:?} is not allowed for image {:?} (allowed: {})",
            instance_type.unwrap_or_default(),
            class.name,
            names(types, |i| i.name)
        )),
    }
}

impl Selection {
    /// The sandbox address of `instance_id`'s sandbox of this selection.
    pub fn address(&self, instance_id: &str) -> String {
        if self.instance_type.binding == DEFAULT_BINDING {
            return instance_id.to_owned();
        }
        format!(
            "{instance_id}{ADDRESS_SEPARATOR}{}.{}",
            self.class.name, self.instance_type.name
        )
    }
}

/// The run instance id an address is for (what the agent knows it by).
pub fn instance_of(address: &str) -> &str {
    address
        .split_once(ADDRESS_SEPARATOR)
        .map_or(address, |(id, _)| id)
}

/// The class and instance type of an address's sandbox, as a summary says
/// it: "the `node` sandbox (basic)". None for an address no class has.
pub fn described(address: &str) -> Option<String> {
    let selected = match address.split_once(ADDRESS_SEPARATOR) {
        None => select(None, None),
        Some((_, pair)) => {
            let (class, instance_type) = pair.split_once('.').unwrap_or((pair, ""));
            select(Some(class), Some(instance_type))
        }
    };
    let s = selected.ok()?;
    Some(format!(
        "the `{}` sandbox ({})",
        s.class.name, s.instance_type.name
    ))
}

/// The Durable Object binding that runs an address's sandbox.
pub fn binding_of(address: &str) -> Result<&'static str, String> {
    let Some((_, pair)) = address.split_once(ADDRESS_SEPARATOR) else {
        return Ok(DEFAULT_BINDING);
    };
    let (class, instance_type) = pair.split_once('.').unwrap_or((pair, ""));
    select(Some(class), Some(instance_type)).map(|s| s.instance_type.binding)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_base_on_its_first_type_and_keeps_the_bare_id() {
        let s = select(None, None).unwrap();
        assert_eq!((s.class.name, s.instance_type.name), ("base", "lite"));
        assert_eq!(s.address("check-x"), "check-x");
        assert_eq!(binding_of("check-x"), Ok("SANDBOX"));
        assert_eq!(described("check-x").unwrap(), "the `base` sandbox (lite)");
    }

    #[test]
    fn a_summary_names_the_class_and_type_of_an_address() {
        let rust = select(Some("rust"), Some("standard-2")).unwrap();
        let address = rust.address("check-x");
        assert_eq!(
            described(&address).unwrap(),
            "the `rust` sandbox (standard-2)"
        );
        assert_eq!(described("check-x~python.big"), None);
    }

    #[test]
    fn a_class_and_a_larger_type_route_to_their_own_binding() {
        let s = select(Some("rust"), Some("standard-2")).unwrap();
        let address = s.address("check-x");
        assert_eq!(address, "check-x~rust.standard-2");
        assert_eq!(instance_of(&address), "check-x");
        assert_eq!(binding_of(&address), Ok("SANDBOX_RUST_STANDARD_2"));
        let node = select(Some("node"), None).unwrap().address("i");
        assert_eq!(binding_of(&node), Ok("SANDBOX_NODE"));
    }

    #[test]
    fn unknown_classes_and_types_name_what_exists() {
        let e = select(Some("python"), None).unwrap_err();
        assert!(e.contains("(classes: base, node, rust)"), "{e}");
        let e = select(Some("node"), Some("standard-4")).unwrap_err();
        assert!(e.contains("not allowed for image \"node\""), "{e}");
        assert!(e.contains("(allowed: basic, standard-1)"), "{e}");
        assert!(binding_of("i~nope.lite").is_err());
        assert!(binding_of("i~node").is_err());
    }

    #[test]
    fn every_binding_is_distinct() {
        let mut all: Vec<&str> = IMAGE_CLASSES
            .iter()
            .flat_map(|c| c.instance_types.iter().map(|t| t.binding))
            .collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
        assert!(IMAGE_CLASSES.iter().all(|c| !c.instance_types.is_empty()));
    }
}
