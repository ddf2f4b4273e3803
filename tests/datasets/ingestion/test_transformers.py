"""Whitespace normalisation and secret redaction (no database)."""

from __future__ import annotations

import pytest

from datasets.ingestion.transformers import (
    SecretRedactor,
    normalize_whitespace,
    transform_document,
)


def test_trailing_whitespace_and_blank_line_runs_are_tidied() -> None:
    text = "# 标题  \n\n\n\n第一段。\t \n\n\n第二段。\n\n\n"
    assert normalize_whitespace(text) == "# 标题\n\n第一段。\n\n第二段。"


def test_nbsp_and_zero_width_spaces_are_normalised() -> None:
    text = "max\u00a0memory\u202f=\u00a02gb and red\u200bis\u2060 zero\ufeffwidth"
    assert normalize_whitespace(text) == "max memory = 2gb and redis zerowidth"


def test_emoji_joiners_are_kept() -> None:
    family = "team \U0001f468\u200d\U0001f469\u200d\U0001f467"
    assert normalize_whitespace(family) == family


def test_tabs_outside_code_become_spaces() -> None:
    assert normalize_whitespace("key:\tvalue") == "key:    value"


def test_fenced_code_keeps_tabs_blank_lines_and_nbsp() -> None:
    code = "all:\n\tgo build ./...\n\n\n\n\tgo test\u00a0./...\n"
    text = f"Build:\n\n```make\n{code}```\n\n\n\nDone."
    expected = f"Build:\n\n```make\n{code}```\n\nDone."
    assert normalize_whitespace(text) == expected


def test_trailing_spaces_inside_code_are_removed_but_not_tabs() -> None:
    text = "```tsv\nname\tvalue\t\nrow  \n```"
    assert normalize_whitespace(text) == "```tsv\nname\tvalue\t\nrow\n```"


def test_crlf_input_is_normalised() -> None:
    assert normalize_whitespace("a  \r\n\r\n\r\n\r\nb\r\n") == "a\n\nb"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("password: hunter2", "password: [REDACTED]"),
        ("PASSWORD=abc", "PASSWORD=[REDACTED]"),
        ("export MYSQL_ROOT_PASSWORD=s3cr3t", "export MYSQL_ROOT_PASSWORD=[REDACTED]"),
        ('{"api_key": "sk-live-123"}', '{"api_key": "[REDACTED]"}'),
        ("Authorization: Bearer abc.def", "Authorization: Bearer [REDACTED]"),
        ('{"Authorization": "Bearer abc123"}', '{"Authorization": "Bearer [REDACTED]"}'),
        (
            "curl -H 'Authorization: Basic dXNlcjpwYXNz' https://api",
            "curl -H 'Authorization: Basic [REDACTED]' https://api",
        ),
        ("https://hook/cb?token=abc123&user=ops", "https://hook/cb?token=[REDACTED]&user=ops"),
        ("secret=topsecret", "secret=[REDACTED]"),
        ("access_key: AK123", "access_key: [REDACTED]"),
        ("secret_key: SK456", "secret_key: [REDACTED]"),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG", "aws_secret_access_key = [REDACTED]"),
        ("mysql://user:pass@db:3306/app", "mysql://user:[REDACTED]@db:3306/app"),
        ("redis://:p%40ss@cache:6379/0", "redis://:[REDACTED]@cache:6379/0"),
        ("密码: xxx", "密码: [REDACTED]"),
        ("数据库密码：Abc123，请妥善保管。", "数据库密码：[REDACTED]，请妥善保管。"),
        ("- **密码**：root123", "- **密码**：[REDACTED]"),
        ("**Password:** hunter2", "**Password:** [REDACTED]"),
        ("`DB_PASSWORD=abc`", "`DB_PASSWORD=[REDACTED]`"),
        ('password: "it\'s long"', 'password: "[REDACTED]"'),
    ],
)
def test_secret_values_are_redacted_and_key_names_kept(text: str, expected: str) -> None:
    assert SecretRedactor().redact(text) == expected


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("use sk-proj-AbCdEfGhIjKlMnOpQrStUvWx in dev", "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx"),
        ("id AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE"),
        ("gh ghp_" + "a1" * 18 + " ok", "ghp_" + "a1" * 18),
        ("slack xoxb-1234567890-abcdef", "xoxb-1234567890-abcdef"),
        ("jwt eyJhbGciOiJI.eyJzdWIiOiIx.SflKxwRJSMeKKF2QT4", "eyJhbGciOiJI.eyJzdWIiOiIx"),
    ],
)
def test_well_known_token_formats_are_redacted_anywhere(text: str, secret: str) -> None:
    redacted = SecretRedactor().redact(text)
    assert secret not in redacted and "[REDACTED]" in redacted


@pytest.mark.parametrize(
    "text",
    [
        "Check the password policy before rotating credentials.",
        "The token bucket algorithm limits bursts.",
        "令牌桶算法用于限流，密码策略要求至少 12 位。",
        "max_connections: 500",
        "max_tokens: 4096",
        "password_min_length: 12",
        "https://example.com:8443/path?page=2",
        "password: ${DB_PASSWORD}",
        "api_key: <your-api-key>",
        'token: "{{ vault_token }}"',
        "curl -H 'Authorization: Bearer $TOKEN' https://api",
        "password: ********",
        "if password == expected:",
    ],
)
def test_prose_numbers_and_placeholders_are_left_alone(text: str) -> None:
    assert SecretRedactor().redact(text) == text


def test_private_key_block_is_redacted_with_its_armour_kept() -> None:
    text = (
        "部署密钥如下：\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
        "QyNTUxOQAAACD\n-----END OPENSSH PRIVATE KEY-----\n之后重启。"
    )
    # In as many lines as the key had: what follows keeps its line numbers.
    assert SecretRedactor().redact(text) == (
        "部署密钥如下：\n-----BEGIN OPENSSH PRIVATE KEY-----\n[REDACTED]\n\n"
        "-----END OPENSSH PRIVATE KEY-----\n之后重启。"
    )


def test_truncated_private_key_block_is_still_redacted() -> None:
    text = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx4kZ9\nMIIEowIBAAKCAQEAy5\n\nnext"
    redacted = SecretRedactor().redact(text)
    assert "MIIEow" not in redacted and redacted.endswith("\n\nnext")


def test_private_key_under_a_yaml_key_is_redacted_whole() -> None:
    text = "private_key: -----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBk\n-----END EC PRIVATE KEY-----"
    redacted = SecretRedactor().redact(text)
    assert redacted.startswith("private_key: -----BEGIN EC PRIVATE KEY-----\n[REDACTED]")
    assert "MHcCAQEEIBk" not in redacted


def test_redaction_is_idempotent() -> None:
    redactor = SecretRedactor()
    text = "password: hunter2\nmysql://u:p@h\nAuthorization: Bearer abc\n密码：abc"
    once = redactor.redact(text)
    assert redactor.redact(once) == once


def test_extra_pattern_replaces_the_whole_match() -> None:
    redactor = SecretRedactor(extra_patterns=[r"\bEMP-\d{6}\b"])
    assert redactor.redact("owner EMP-123456") == "owner [REDACTED]"


def test_extra_pattern_with_secret_group_replaces_only_that_group() -> None:
    redactor = SecretRedactor(extra_patterns=[r"mysql -u\s*\S+\s+-p(?P<secret>\S+)"])
    assert redactor.redact("mysql -u root -pS3cret!") == "mysql -u root -p[REDACTED]"


def test_extra_pattern_matching_empty_text_inserts_nothing() -> None:
    assert SecretRedactor(extra_patterns=[r"x*"]).redact("abc") == "abc"


def test_invalid_extra_pattern_raises_value_error() -> None:
    with pytest.raises(ValueError, match="invalid redaction pattern"):
        SecretRedactor(extra_patterns=["(unclosed"])


def test_transform_document_normalises_then_redacts() -> None:
    # The NBSP after the colon is only matched once it has been normalised.
    text = "密码：\u00a0abc\u200b123  \n\n\n\n完成。"
    redactor = SecretRedactor()
    done = transform_document(text, redactor=redactor)
    assert done.text == "密码： [REDACTED]\n\n完成。"
    assert done.origins == (0, 1, 4)  # the file's line of each line


def test_transform_document_without_redactor_keeps_secrets() -> None:
    assert transform_document("password: hunter2  ", redactor=None).text == "password: hunter2"
