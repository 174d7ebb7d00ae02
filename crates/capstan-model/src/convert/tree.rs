//! Edits of JSON trees by path, the vocabulary the version mappings are written in: take a field
//! out (dropping containers it leaves empty), put one in (creating containers on the way), move,
//! rename, and visit list items. Every error names the offending field.

use serde_json::{Map, Value};

use super::ConvertError;

/// A JSON object.
pub(super) type Object = Map<String, Value>;

/// `base.key` for error messages (`key` alone at the root).
pub(super) fn join(base: &str, key: &str) -> String {
    if base.is_empty() {
        key.to_owned()
    } else {
        format!("{base}.{key}")
    }
}

/// `base.a.b.c` for error messages.
pub(super) fn join_all(base: &str, path: &[&str]) -> String {
    path.iter()
        .fold(base.to_owned(), |acc, key| join(&acc, key))
}

/// The value at `path` below `root`, if every step is an object holding the next key.
pub(super) fn get<'a>(root: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(root, |value, key| value.get(key))
}

/// The value at `path` below `root`, mutably.
pub(super) fn get_mut<'a>(root: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    path.iter()
        .try_fold(root, |value, key| value.as_object_mut()?.get_mut(*key))
}

/// Removes the value at `path` below `root` and returns it. Objects on the way that this leaves
/// empty are removed as well (never `root` itself), so moving the only field out of a container
/// does not leave an empty container behind.
pub(super) fn take(root: &mut Value, path: &[&str]) -> Option<Value> {
    let (first, rest) = path.split_first()?;
    let map = root.as_object_mut()?;
    if rest.is_empty() {
        return map.remove(*first);
    }
    let child = map.get_mut(*first)?;
    let taken = take(child, rest)?;
    if child.as_object().is_some_and(Map::is_empty) {
        map.remove(*first);
    }
    Some(taken)
}

/// Sets the value at `path` below `root`, creating objects on the way. `at` names `root` in errors.
pub(super) fn put(
    root: &mut Value,
    path: &[&str],
    value: Value,
    at: &str,
) -> Result<(), ConvertError> {
    let Some((last, parents)) = path.split_last() else {
        *root = value;
        return Ok(());
    };
    let mut current = root;
    let mut current_path = at.to_owned();
    for key in parents {
        let map = current
            .as_object_mut()
            .ok_or_else(|| ConvertError::not_an_object(&current_path))?;
        current_path = join(&current_path, key);
        current = map.entry(*key).or_insert_with(|| Value::Object(Map::new()));
    }
    current
        .as_object_mut()
        .ok_or_else(|| ConvertError::not_an_object(&current_path))?
        .insert((*last).to_owned(), value);
    Ok(())
}

/// Moves the value at `from` to `to` (both below `root`), if there is one.
pub(super) fn move_value(
    root: &mut Value,
    from: &[&str],
    to: &[&str],
    at: &str,
) -> Result<(), ConvertError> {
    if let Some(value) = take(root, from) {
        put(root, to, value, at)?;
    }
    Ok(())
}

/// Renames `from` to `to` within the object `root`, keeping the field's position.
pub(super) fn rename(root: &mut Value, from: &str, to: &str) {
    let Some(map) = root.as_object_mut() else {
        return;
    };
    if !map.contains_key(from) {
        return;
    }
    let renamed: Object = std::mem::take(map)
        .into_iter()
        .map(|(key, value)| {
            if key == from {
                (to.to_owned(), value)
            } else {
                (key, value)
            }
        })
        .collect();
    *map = renamed;
}

/// Calls `edit` on every item of the list at `path` below `root` (if there is one), with the item's
/// path for errors. Fails if the value there is not a list.
pub(super) fn each_item(
    root: &mut Value,
    path: &[&str],
    at: &str,
    mut edit: impl FnMut(&mut Value, &str) -> Result<(), ConvertError>,
) -> Result<(), ConvertError> {
    let list_path = join_all(at, path);
    let Some(value) = get_mut(root, path) else {
        return Ok(());
    };
    let items = value
        .as_array_mut()
        .ok_or_else(|| ConvertError::WrongType {
            path: list_path.clone(),
            expected: "a list",
        })?;
    for (index, item) in items.iter_mut().enumerate() {
        edit(item, &format!("{list_path}[{index}]"))?;
    }
    Ok(())
}

/// Calls `edit` on the value at `path` below `root`, if there is one, with its path for errors.
pub(super) fn with_value(
    root: &mut Value,
    path: &[&str],
    at: &str,
    edit: impl FnOnce(&mut Value, &str) -> Result<(), ConvertError>,
) -> Result<(), ConvertError> {
    match get_mut(root, path) {
        Some(value) => edit(value, &join_all(at, path)),
        None => Ok(()),
    }
}

/// The string at `key` of `value`, if present; an error if present but not a string.
pub(super) fn string_at<'a>(
    value: &'a Value,
    key: &str,
    at: &str,
) -> Result<Option<&'a str>, ConvertError> {
    match value.get(key) {
        None => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(ConvertError::WrongType {
            path: join(at, key),
            expected: "a string",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn take_prunes_emptied_containers_but_not_the_root() {
        let mut value = json!({"a": {"b": {"c": 1}, "d": 2}});
        assert_eq!(take(&mut value, &["a", "b", "c"]), Some(json!(1)));
        assert_eq!(value, json!({"a": {"d": 2}}));
        assert_eq!(take(&mut value, &["a", "d"]), Some(json!(2)));
        assert_eq!(value, json!({}));
        assert_eq!(take(&mut value, &["a"]), None);
        let mut empty_before = json!({"a": {"b": {}, "c": 1}});
        assert_eq!(take(&mut empty_before, &["a", "c"]), Some(json!(1)));
        assert_eq!(empty_before, json!({"a": {"b": {}}}));
    }

    #[test]
    fn put_creates_containers_and_names_what_is_in_the_way() {
        let mut value = json!({"spec": {"x": 1}});
        put(&mut value, &["spec", "rollout", "after"], json!("t"), "").unwrap();
        assert_eq!(value, json!({"spec": {"x": 1, "rollout": {"after": "t"}}}));
        let err = put(&mut value, &["spec", "x", "y"], json!(1), "").unwrap_err();
        assert_eq!(err.to_string(), "spec.x must be an object");
    }

    #[test]
    fn rename_keeps_position() {
        let mut value = json!({"a": 1, "b": 2, "c": 3});
        rename(&mut value, "b", "z");
        let keys: Vec<_> = value.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["a", "z", "c"]);
    }

    #[test]
    fn each_item_reports_item_paths() {
        let mut value = json!({"list": [1, "x"]});
        let err = each_item(&mut value, &["list"], "spec", |item, at| {
            item.as_i64().map(|_| ()).ok_or(ConvertError::WrongType {
                path: at.to_owned(),
                expected: "a number",
            })
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "spec.list[1] must be a number");
        let mut not_list = json!({"list": 1});
        assert!(each_item(&mut not_list, &["list"], "", |_, _| Ok(())).is_err());
    }
}
