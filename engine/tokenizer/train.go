package tokenizer

import "errors"

// TrainDefault trains a deterministic byte-level BPE tokenizer of vocabSize
// entries on the English corpus embedded in this package and returns the
// contents of tokenizer.json and tokenizer_config.json.
func TrainDefault(vocabSize int) (tokenizerJSON, tokenizerConfigJSON []byte, err error) {
	return nil, nil, errors.New("tokenizer: TrainDefault is not implemented yet")
}

// Train is TrainDefault on a caller-supplied corpus.
func Train(corpus []byte, vocabSize int) (tokenizerJSON, tokenizerConfigJSON []byte, err error) {
	return nil, nil, errors.New("tokenizer: Train is not implemented yet")
}
