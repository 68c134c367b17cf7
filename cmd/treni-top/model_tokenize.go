package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/treni-top/treni-top/engine/tokenizer"
)

// tokenizeResult is one line of `model tokenize --json`.
type tokenizeResult struct {
	Text    string   `json:"text"`
	IDs     []int32  `json:"ids"`
	Pieces  []string `json:"pieces"`
	Decoded string   `json:"decoded"`
}

// newModelTokenizeCmd is `treni-top model tokenize`.
func newModelTokenizeCmd() *cobra.Command {
	var asJSON, noCache bool
	cmd := &cobra.Command{
		Use:   "tokenize DIR TEXT...",
		Short: "Tokenize text with a model directory's tokenizer (ids and pieces)",
		Long: `Tokenize each TEXT with DIR's tokenizer.json exactly as Hugging Face
tokenizers' encode(text, add_special_tokens=False) does: special tokens written
in the text are recognised. Prints the ids and their pieces (byte-level form,
so a leading space shows as Ġ); --json prints one JSON object per text with
"text", "ids", "pieces" and "decoded", the input of
engine/tokenizer/testdata/hf_tokenizer_check.py.`,
		Example: "  treni-top model tokenize ./qwen3-tiny 'Hello, world!' --json",
		Args:    cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opt := tokenizer.LoadOptions{}
			if noCache {
				opt.CacheDir = "-"
			}
			tok, _, err := tokenizer.LoadWith(args[0], opt)
			if err != nil {
				return withExit(2, err)
			}
			out := cmd.OutOrStdout()
			enc := json.NewEncoder(out)
			enc.SetEscapeHTML(false)
			for _, text := range args[1:] {
				ids := tok.Encode(text)
				pieces := make([]string, len(ids))
				for i, id := range ids {
					pieces[i] = tok.Piece(id)
				}
				if asJSON {
					if err := enc.Encode(tokenizeResult{Text: text, IDs: ids, Pieces: pieces, Decoded: tok.Decode(ids)}); err != nil {
						return err
					}
					continue
				}
				fmt.Fprintf(out, "%s\n  %d tokens\n", strconv.Quote(text), len(ids))
				var b strings.Builder
				for i, id := range ids {
					fmt.Fprintf(&b, "  %6d  %s\n", id, strconv.Quote(pieces[i]))
				}
				fmt.Fprint(out, b.String())
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per text")
	cmd.Flags().BoolVar(&noCache, "no-cache", false, "parse tokenizer.json without the binary cache")
	return cmd
}
