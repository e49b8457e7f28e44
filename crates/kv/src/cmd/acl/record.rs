//! The users' record in the region (docs/FORMAT.md §11.10): per user its name and the rules
//! that make it again, each length-prefixed.

use super::user::User;

/// The record's version byte.
pub const VERSION: u8 = 1;

/// The record of `users`.
pub fn encode(users: &[User]) -> Vec<u8> {
    let mut out = vec![VERSION];
    out.extend_from_slice(&(users.len() as u32).to_le_bytes());
    for u in users {
        out.extend_from_slice(&(u.name.len() as u32).to_le_bytes());
        out.extend_from_slice(&u.name);
        let rules = u.rules();
        out.extend_from_slice(&(rules.len() as u32).to_le_bytes());
        for r in rules {
            out.extend_from_slice(&(r.len() as u32).to_le_bytes());
            out.extend_from_slice(&r);
        }
    }
    out
}

/// The users a record holds; what is wrong with it otherwise.
pub fn decode(b: &[u8]) -> Result<Vec<User>, String> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], String> {
        let s = b
            .get(at..at + n)
            .ok_or_else(|| format!("the ACL record ends at byte {at}, {n} more expected"))?;
        at += n;
        Ok(s)
    };
    if take(1)? != [VERSION] {
        return Err(format!("the ACL record has version {}, not {VERSION}", b[0]));
    }
    let u32_at = |s: &[u8]| u32::from_le_bytes(s.try_into().expect("4 bytes")) as usize;
    let n = u32_at(take(4)?);
    let mut users = Vec::new();
    for _ in 0..n {
        let nl = u32_at(take(4)?);
        let mut u = User::new(take(nl)?);
        let rules = u32_at(take(4)?);
        for _ in 0..rules {
            let rl = u32_at(take(4)?);
            let r = take(rl)?;
            u.apply(r).map_err(|e| format!("the ACL record's rule {}: {e}", String::from_utf8_lossy(r)))?;
        }
        users.push(u);
    }
    Ok(users)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_come_back_from_their_record_and_format_md_says_how() {
        let mut a = User::new(b"alice");
        for r in ["on", ">pw", "~a b", "%R~r*", "&ch", "-@all", "+get", "+select|0"] {
            a.apply(r.as_bytes()).unwrap();
        }
        let users = vec![User::default_user(), a];
        let rec = encode(&users);
        assert_eq!(decode(&rec).unwrap(), users);
        assert_eq!(&rec[..5], &[VERSION, 2, 0, 0, 0]);
        assert_eq!(&rec[5..9], &7u32.to_le_bytes());
        assert_eq!(&rec[9..16], b"default");
        assert!(decode(&rec[..rec.len() - 1]).is_err());
        let doc = include_str!("../../../../../docs/FORMAT.md");
        assert!(doc
            .contains(&format!("`version` (u8, {VERSION}), `users` (u32), then per user `name_len` (u32)")));
    }
}
