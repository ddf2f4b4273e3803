"""Write the sample's documents in other formats than markdown into knowledge_base/:
a PDF, a Word file and an HTML page, each a runbook of its own (written for this project, under
its licence), so that the demo imports every kind of file the platform reads.

    python scripts/make_sample_documents.py     # needs the dev extras (fpdf2, python-docx)

The output is checked in (the demo needs no generator); running this again writes the same
bytes: the dates inside the files are fixed.
"""

from __future__ import annotations

import datetime as dt
import html
import io
import zipfile
from pathlib import Path

from docx import Document
from fpdf import FPDF

ROOT = Path(__file__).resolve().parent.parent / "knowledge_base"
CJK_FONT = "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc"
WRITTEN = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)

Section = tuple[str, list[str]]  # a heading and its paragraphs

# One page of the PDF per section: the evidence of a lookup names the page it is on.
ELASTICSEARCH: list[Section] = [
    ("Elasticsearch cluster RED: unassigned shards", [
        "This runbook handles an Elasticsearch cluster whose health is red or yellow because "
        "shards are unassigned. Red means at least one primary shard is unassigned, so some "
        "documents cannot be searched or indexed; yellow means only replicas are missing.",
        "集群状态为 red 时，部分主分片（primary shard）没有分配，相关索引的读写会失败；yellow 表示"
        "只有副本分片未分配，数据仍可读写，但没有冗余。",
    ]),
    ("Symptoms", [
        "GET _cluster/health answers \"status\": \"red\" with unassigned_shards above zero.",
        "Search requests fail with all shards failed or return partial results "
        "(_shards.failed > 0); bulk indexing answers 503 unavailable_shards_exception.",
        "Kibana shows the cluster in red; 监控告警：elasticsearch cluster status red。",
    ]),
    ("Diagnosis", [
        "Ask the cluster why: GET _cluster/allocation/explain names the first unassigned shard "
        "and the decider that refuses it (disk_threshold, same_shard, max_retry, awareness).",
        "List the unassigned shards and their reasons with "
        "GET _cat/shards?v&h=index,shard,prirep,state,unassigned.reason.",
        "Check the disk watermarks: GET _cat/allocation?v. Above the high watermark (90 % by "
        "default) no shard is allocated to the node; above the flood stage (95 %) its indices "
        "become read-only (index.blocks.read_only_allow_delete).",
        "A node that left the cluster (NODE_LEFT) takes its shards with it: check "
        "GET _cat/nodes?v and the node's own log for OutOfMemoryError or long GC pauses.",
    ]),
    ("Fix", [
        "Disk: free space or add nodes, then the allocation resumes by itself; remove the "
        "read-only block with PUT */_settings {\"index.blocks.read_only_allow_delete\": null}.",
        "Allocation retries exhausted (max_retry): POST _cluster/reroute?retry_failed=true "
        "after fixing the cause.",
        "A lost primary with no copy left: restore the index from a snapshot. Only as a last "
        "resort, and accepting data loss, allocate an empty primary with "
        "allocate_empty_primary.",
        "处理完成后再次执行 GET _cluster/health?wait_for_status=green&timeout=60s 确认恢复。",
    ]),
    ("Prevention", [
        "Alert on disk usage at 80 % per data node, well before the low watermark (85 %).",
        "Keep number_of_replicas at 1 or more for every index that matters, and take snapshots "
        "to a repository outside the cluster on a schedule (SLM).",
        "Spread replicas across zones with cluster.routing.allocation.awareness.attributes.",
    ]),
]

CHRONY: list[Section] = [
    ("服务器时钟漂移与 NTP 同步异常（chrony）", [
        "本手册处理服务器时间不准的问题：节点之间时间相差数秒甚至数分钟，导致 TLS 握手失败、"
        "Kerberos 认证报 Clock skew too great、分布式数据库拒绝写入、日志时间线错乱。",
    ]),
    ("症状", [
        "应用报 certificate is not yet valid 或 x509: certificate has expired or is not yet "
        "valid，而证书本身并没有过期。",
        "Kerberos / Active Directory 登录失败：KRB_AP_ERR_SKEW, Clock skew too great。",
        "CockroachDB 等数据库节点报 clock offset 超过 max-offset 后自行退出。",
        "timedatectl 显示 System clock synchronized: no。",
    ]),
    ("排查步骤", [
        "chronyc tracking：看 System time 与 NTP 时间的偏差（offset）和 Leap status；"
        "Leap status 为 Not synchronised 说明尚未同步。",
        "chronyc sources -v：看每个时间源的状态，^* 表示当前选中的源，^? 表示不可达。"
        "全部为 ^? 时，检查防火墙是否放行 UDP 123 端口。",
        "虚拟机上确认没有同时运行 ntpd、systemd-timesyncd 与 chronyd 多个同步服务，"
        "它们会互相调整时钟。",
    ]),
    ("处理方法", [
        "偏差很大时先执行 chronyc makestep 一次性校正，"
        "再观察 chronyc tracking 的 offset 是否收敛。",
        "在 /etc/chrony.conf 中配置至少三个可达的时间源（内网 NTP 服务器优先），并保留 "
        "makestep 1.0 3，允许启动时大步校正。",
        "修改后执行 systemctl restart chronyd，并用 chronyc sources 确认出现 ^* 源。",
    ]),
    ("预防", [
        "监控每台机器的时钟偏差（node_timex_offset_seconds），超过 100ms 告警。",
        "镜像中统一只启用 chronyd 一个时间同步服务。",
    ]),
]

NGINX_413: list[Section] = [
    ("Nginx 413 Request Entity Too Large", [
        "This runbook handles uploads refused by Nginx with 413 Request Entity Too Large: the "
        "request body is larger than client_max_body_size allows (1 MB by default), so Nginx "
        "answers before the application ever sees the request.",
    ]),
    ("Symptoms", [
        "Browsers show 413 Request Entity Too Large for file uploads above about 1 MB; small "
        "uploads work.",
        "The Nginx error log says: client intended to send too large body: 5242880 bytes.",
        "The application's own logs show nothing: the request never reached it.",
    ]),
    ("Diagnosis", [
        "Find the client_max_body_size in effect with nginx -T | grep client_max_body_size: "
        "it may be set in http, server or location, and the innermost one wins.",
        "Behind a Kubernetes ingress-nginx controller the limit is the annotation "
        "nginx.ingress.kubernetes.io/proxy-body-size on the Ingress.",
        "A load balancer or CDN in front may have its own body limit: test against the Nginx "
        "host directly with curl -F file=@big.bin to tell them apart.",
    ]),
    ("Fix", [
        "Raise the limit only where uploads happen, e.g. client_max_body_size 50m; in the "
        "location of the upload endpoint, then nginx -t and nginx -s reload.",
        "Large uploads also need client_body_timeout and proxy_request_buffering off; for "
        "streaming to the backend, and the backend's own limit raised to match.",
    ]),
]


def pdf(sections: list[Section]) -> bytes:
    document = FPDF()
    document.set_creation_date(WRITTEN)
    document.add_font("cjk", fname=CJK_FONT)
    document.set_title(sections[0][0])
    for number, (heading, paragraphs) in enumerate(sections):
        document.add_page()
        document.set_font("cjk", size=18 if number == 0 else 14)
        document.multi_cell(0, 9, heading)
        document.ln(3)
        document.set_font("cjk", size=11)
        for paragraph in paragraphs:
            document.multi_cell(0, 6, paragraph)
            document.ln(2)
    return bytes(document.output())


def docx(sections: list[Section]) -> bytes:
    document = Document()
    document.core_properties.title = sections[0][0]
    document.core_properties.created = document.core_properties.modified = WRITTEN
    for number, (heading, paragraphs) in enumerate(sections):
        document.add_heading(heading, level=1 if number == 0 else 2)
        for paragraph in paragraphs:
            document.add_paragraph(paragraph)
    out = io.BytesIO()
    document.save(out)
    return _dated(out.getvalue())


def _dated(office: bytes) -> bytes:
    """The zip with every member dated WRITTEN (python-docx dates them now)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(office)) as source, \
            zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for member in source.infolist():
            dated = zipfile.ZipInfo(member.filename, date_time=WRITTEN.timetuple()[:6])
            dated.compress_type = zipfile.ZIP_DEFLATED
            target.writestr(dated, source.read(member))
    return out.getvalue()


def html_page(sections: list[Section]) -> bytes:
    parts = [f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>{html.escape(sections[0][0])}</title></head><body>"]
    for number, (heading, paragraphs) in enumerate(sections):
        tag = "h1" if number == 0 else "h2"
        parts.append(f"<{tag}>{html.escape(heading)}</{tag}>")
        parts += [f"<p>{html.escape(paragraph)}</p>" for paragraph in paragraphs]
    parts.append("</body></html>\n")
    return "\n".join(parts).encode()


def main() -> None:
    outputs = {
        "database/elasticsearch-unassigned-shards.pdf": pdf(ELASTICSEARCH),
        "linux/chrony-clock-drift.docx": docx(CHRONY),
        "web/nginx-413-request-too-large.html": html_page(NGINX_413),
    }
    for relative, data in outputs.items():
        (ROOT / relative).write_bytes(data)
        print(f"wrote knowledge_base/{relative} ({len(data):,} bytes)")


if __name__ == "__main__":
    main()
