#!/usr/bin/env bash
# Installs the published MCP reference servers the MCP tests run, pinned,
# into .cache/mcp (once per version): @modelcontextprotocol/server-everything
# and @modelcontextprotocol/server-filesystem, from the npm registry. Node
# (/usr/bin/node) and npm must be installed.
set -euo pipefail
dir="$(cd "$(dirname "$0")/.." && pwd)/.cache/mcp"
EVERYTHING_VERSION=2026.8.31
FILESYSTEM_VERSION=2026.8.31
want="everything@$EVERYTHING_VERSION filesystem@$FILESYSTEM_VERSION"
if [ "$(cat "$dir/versions" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
command -v npm >/dev/null || { echo "npm is not installed (apt-get install nodejs npm)" >&2; exit 1; }
echo "installing MCP servers ($want) into $dir"
mkdir -p "$dir"
rm -f "$dir/versions"
npm install --prefix "$dir" --no-audit --no-fund --no-save --loglevel=error \
  "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" \
  "@modelcontextprotocol/server-filesystem@$FILESYSTEM_VERSION"
echo "$want" >"$dir/versions"
