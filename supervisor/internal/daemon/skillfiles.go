package daemon

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
)

// Caps of what an instructions skill's folder shows MCP clients as
// resources: the files listed, and the bytes of one file.
const (
	MaxSkillFiles     = 256
	MaxSkillFileBytes = 1 << 20
)

// skillRoot opens the skill folder as an os.Root, so no path a caller
// gives (.., an absolute path, a symlink) reaches outside it.
func (d *Daemon) skillRoot(w http.ResponseWriter, id string) *os.Root {
	if !SkillIDPattern().MatchString(id) {
		apiErr(w, kindBadRequest, fmt.Errorf("skill_id %q must match %s", id, SkillIDPattern()))
		return nil
	}
	root, err := os.OpenRoot(filepath.Join(d.cfg.SkillsDir, id))
	if err != nil {
		apiErr(w, kindNotFound, fmt.Errorf("no skill %q in %s", id, d.cfg.SkillsDir))
		return nil
	}
	return root
}

// handleSkillFiles lists the regular files of a skill folder of at most
// MaxSkillFileBytes: no symlink is followed, at most MaxSkillFiles, in
// path order.
func (d *Daemon) handleSkillFiles(w http.ResponseWriter, r *http.Request) {
	root := d.skillRoot(w, r.PathValue("id"))
	if root == nil {
		return
	}
	defer root.Close()
	files := []SkillFile{}
	err := fs.WalkDir(root.FS(), ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.Type().IsRegular() {
			return nil
		}
		if len(files) == MaxSkillFiles {
			return fs.SkipAll
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		if fi.Size() <= MaxSkillFileBytes {
			files = append(files, SkillFile{Path: p, Size: fi.Size()})
		}
		return nil
	})
	if err != nil {
		apiErr(w, kindInternal, fmt.Errorf("list skill files: %w", err))
		return
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	writeJSON(w, http.StatusOK, files)
}

// handleSkillFile sends one regular file of a skill folder, at most
// MaxSkillFileBytes (413 beyond).
func (d *Daemon) handleSkillFile(w http.ResponseWriter, r *http.Request) {
	root := d.skillRoot(w, r.PathValue("id"))
	if root == nil {
		return
	}
	defer root.Close()
	p := r.PathValue("path")
	if !fs.ValidPath(p) || path.Clean(p) != p {
		apiErr(w, kindBadRequest, fmt.Errorf("path %q is not a clean relative path", p))
		return
	}
	fi, err := root.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist) || (err == nil && !fi.Mode().IsRegular()):
		apiErr(w, kindNotFound, fmt.Errorf("no regular file %q in skill %s", p, r.PathValue("id")))
		return
	case err != nil:
		apiErr(w, kindBadRequest, fmt.Errorf("path %q: %w", p, err))
		return
	case fi.Size() > MaxSkillFileBytes:
		apiErr(w, kindTooLarge, fmt.Errorf("%s is over %d bytes", p, MaxSkillFileBytes))
		return
	}
	f, err := root.Open(p)
	if err != nil {
		apiErr(w, kindNotFound, fmt.Errorf("open %q: %w", p, err))
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = io.Copy(w, io.LimitReader(f, MaxSkillFileBytes))
}
