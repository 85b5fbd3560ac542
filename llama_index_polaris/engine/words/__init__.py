"""How text becomes words for search: blobs left unread (``blobs``), Chinese, Japanese and Korean
runs cut into character bigrams (``bigrams``), and FTS5's own tokenizer run on both backends
(``tokenize``). Index time and query time read text through these alike."""
